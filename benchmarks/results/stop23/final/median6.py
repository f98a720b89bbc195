"""Median over sittings 2 and 3 (six alternations, main at 797af63 vs d6d7dde) of each
workload's main/d6 ratio (> 1 = main better), with the lowest and highest, and actor_sync's
ratio to the raw pyzmq ipc round trip measured just before each main run."""

import json
import statistics


def load(path: str) -> dict:
    with open(path) as f:
        data = json.load(f)
    return data["workloads"] if "workloads" in data else data["results"]


def raw(path: str) -> float:
    with open(path) as f:
        return float(f.read().split()[1])


runs = [(load(f"{s}/anchor-main-{i}.json"), load(f"{s}/anchor-d6-{i}.json"),
         raw(f"{s}/raw-{i}.txt"))
        for s in ("sitting2", "sitting3") for i in (1, 2, 3)]
print(f"{'workload':22} {'median':>7} {'min':>6} {'max':>6}  below 0.95")
for name in runs[0][0]:
    ratios = []
    for main, base, _ in runs:
        mv, bv = main[name]["value"], base[name]["value"]
        ratios.append(bv / mv if main[name]["better"] == "lower" else mv / bv)
    low = sum(r < 0.95 for r in ratios)
    print(f"{name:22} {statistics.median(ratios):7.2f} {min(ratios):6.2f} {max(ratios):6.2f}  {low} of 6")
to_raw = [main["actor_sync"]["value"] / raw for main, _, raw in runs]
print("actor_sync / raw ipc round trip:", " ".join(f"{r:.2f}" for r in to_raw),
      f"(median {statistics.median(to_raw):.2f})")
