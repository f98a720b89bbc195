"""Each workload's median main/d6d7dde ratio (> 1 = main better) over the alternations of the
sittings given (folders made by stop23/final/sitting.sh), with the lowest and highest, how many
alternations read below 0.95, and actor_sync's ratio to the raw pyzmq ipc round trip measured
just before each main run.

    python median.py sitting1 sitting2
"""

import glob
import json
import statistics
import sys


def load(path: str) -> dict:
    with open(path) as f:
        data = json.load(f)
    return data["workloads"] if "workloads" in data else data["results"]


def raw(path: str) -> float:
    with open(path) as f:
        return float(f.read().split()[1])


runs = []
for folder in sys.argv[1:]:
    for main_path in sorted(glob.glob(f"{folder}/anchor-main-*.json")):
        i = main_path.rsplit("-", 1)[1].split(".")[0]
        try:
            runs.append((load(main_path), load(f"{folder}/anchor-d6-{i}.json"),
                         raw(f"{folder}/raw-{i}.txt")))
        except (OSError, ValueError, KeyError):
            continue  # an alternation cut short
n = len(runs)
print(f"{n} alternations")
print(f"{'workload':22} {'median':>7} {'min':>6} {'max':>6}  below 0.95")
for name in runs[0][0]:
    ratios = []
    for main, base, _ in runs:
        if name not in main or name not in base:
            continue
        mv, bv = main[name]["value"], base[name]["value"]
        if not mv or not bv:
            continue
        ratios.append(bv / mv if main[name]["better"] == "lower" else mv / bv)
    if not ratios:
        continue
    low = sum(r < 0.95 for r in ratios)
    print(f"{name:22} {statistics.median(ratios):7.2f} {min(ratios):6.2f} {max(ratios):6.2f}"
          f"  {low} of {len(ratios)}")
to_raw = [main["actor_sync"]["value"] / rate for main, _, rate in runs if "actor_sync" in main]
print("actor_sync / raw ipc round trip: " + " ".join(f"{r:.2f}" for r in to_raw)
      + f" (median {statistics.median(to_raw):.2f})")
