"""Anchor figures of main vs d6d7dde, two alternations (run in a folder of anchor-*.json)."""

import json


def workloads(path: str) -> dict:
    with open(path) as f:
        data = json.load(f)
    return data["workloads"] if "workloads" in data else data["results"]


pairs = [(workloads(f"anchor-main-{i}.json"), workloads(f"anchor-d6-{i}.json")) for i in (1, 2)]
print(f"{'workload':22} {'main1':>10} {'d6_1':>10} {'ratio1':>7} "
      f"{'main2':>10} {'d6_2':>10} {'ratio2':>7}  unit")
for name in pairs[0][0]:
    row = []
    for main, base in pairs:
        mv, bv = main[name]["value"], base[name]["value"]
        lower = main[name]["better"] == "lower"
        ratio = (bv / mv if lower else mv / bv) if mv and bv else float("nan")
        row += [mv, bv, ratio]
    print(f"{name:22} {row[0]:10.4g} {row[1]:10.4g} {row[2]:7.2f} {row[3]:10.4g} "
          f"{row[4]:10.4g} {row[5]:7.2f}  {pairs[0][0][name]['unit']}")
