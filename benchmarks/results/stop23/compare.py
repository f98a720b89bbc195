"""Summarise ab.sh's rounds: per round and side, raw rt/s, load, calls/s, the ratio to raw,
the p50 latency of one call, and per call: CPU (schedstat) and wake-ups (voluntary switches) of each process, then the
medians per side.   python compare.py OUT_DIR"""

from __future__ import annotations

import glob
import json
import os
import statistics
import sys


def main() -> None:
    out = sys.argv[1]
    rows = []
    for meta_path in sorted(glob.glob(os.path.join(out, "r*-?.meta.json"))):
        with open(meta_path) as f:
            meta = json.load(f)
        path = meta_path.replace(".meta.json", ".json")
        if not os.path.exists(path):
            continue
        with open(path) as f:
            rep = json.load(f)
        row = dict(meta, calls=rep["calls_per_s"])
        row["ratio"] = row["calls"] / row["raw_rt_per_s"]
        row["p50_us"] = rep["latency_us"]["p50"]
        for proc in ("driver", "worker"):
            row[f"{proc}_cpu"] = sum(r["cpu_us"] for r in rep[proc])
            row[f"{proc}_wake"] = sum(r["wakeups"] for r in rep[proc])
            row[f"{proc}_pre"] = sum(r["preempted"] for r in rep[proc])
        rows.append(row)
    rows.sort(key=lambda r: (r["round"], r["side"]))
    cols = ["raw_rt_per_s", "load1", "calls", "ratio", "p50_us", "driver_cpu", "worker_cpu",
            "driver_wake", "worker_wake", "driver_pre", "worker_pre"]
    print("round side " + " ".join(f"{c:>12s}" for c in cols))
    for r in rows:
        print(f"{r['round']:5d} {r['side']:4s} " + " ".join(f"{r[c]:12.2f}" for c in cols))
    for side in ("A", "B"):
        mine = [r for r in rows if r["side"] == side]
        if mine:
            print(f"median {side}  " + " ".join(
                f"{statistics.median(r[c] for r in mine):12.2f}" for c in cols))


if __name__ == "__main__":
    main()
