"""Summarise anchor_ab.sh's rounds: per round and side the raw rt/s and load beside the
anchor's actor_sync (and its ratio to raw), actor_async and tasks_sync medians, and for
each workload the anchor's CPU (busy_core_s - bg_core_s of the attempt kept: the driver and
its descendants' CPU for the whole workload), then medians.
    python anchor_compare.py OUT_DIR"""

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
            row = json.load(f)
        path = meta_path.replace(".meta.json", ".json")
        if not os.path.exists(path):
            continue
        with open(path) as f:
            rep = json.load(f)
        res = rep["results"]
        row["actor_sync"] = res["actor_sync"]["value"]
        row["ratio"] = row["actor_sync"] / row["raw_rt_per_s"]
        row["actor_async"] = res["actor_async"]["value"]
        row["tasks_sync_us"] = res["tasks_sync"]["value"]
        for name, key in (("actor_sync", "as_cpu_s"), ("actor_async", "aa_cpu_s"),
                          ("tasks_sync", "ts_cpu_s")):
            cpu = rep.get("workload_cpu", {}).get(name, {})
            row[key] = cpu.get("busy_core_s", 0.0) - cpu.get("bg_core_s", 0.0)
        rows.append(row)
    rows.sort(key=lambda r: (r["round"], r["side"]))
    cols = ["raw_rt_per_s", "load1", "actor_sync", "ratio", "as_cpu_s", "actor_async",
            "aa_cpu_s", "tasks_sync_us", "ts_cpu_s"]
    print("round side " + " ".join(f"{c:>13s}" for c in cols))
    for r in rows:
        print(f"{r['round']:5d} {r['side']:4s} " + " ".join(f"{r[c]:13.2f}" for c in cols))
    for side in ("A", "B"):
        mine = [r for r in rows if r["side"] == side]
        if mine:
            print(f"median {side}  " + " ".join(
                f"{statistics.median(r[c] for r in mine):13.2f}" for c in cols))


if __name__ == "__main__":
    main()
