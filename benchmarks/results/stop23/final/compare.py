"""Anchor figures of main vs d6d7dde, three alternations (run in a folder of anchor-*.json)."""

import json


def workloads(path: str) -> dict:
    with open(path) as f:
        data = json.load(f)
    return data["workloads"] if "workloads" in data else data["results"]


pairs = [(workloads(f"anchor-main-{i}.json"), workloads(f"anchor-d6-{i}.json")) for i in (1, 2, 3)]
print(f"{'workload':22}" + "".join(f" {'main'+str(i):>10} {'d6_'+str(i):>10} {'ratio'+str(i):>7}" for i in (1, 2, 3)) + "  unit")
for name in pairs[0][0]:
    row = []
    for main, base in pairs:
        mv, bv = main[name]["value"], base[name]["value"]
        lower = main[name]["better"] == "lower"
        ratio = (bv / mv if lower else mv / bv) if mv and bv else float("nan")
        row += [mv, bv, ratio]
    cells = "".join(f" {row[k]:10.4g} {row[k + 1]:10.4g} {row[k + 2]:7.2f}" for k in (0, 3, 6))
    print(f"{name:22}{cells}  {pairs[0][0][name]['unit']}")
