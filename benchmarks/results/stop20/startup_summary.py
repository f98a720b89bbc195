"""Per-run values, medians of runs, pooled-sample medians and d6/x ratios of startup_ab.sh runs.

    python startup_summary.py OUTDIR d6,before,mine
"""

from __future__ import annotations

import glob
import json
import re
import statistics
import sys

METRICS = ("startup", "init_only", "import", "shutdown")


def main(out: str, names: list[str]) -> None:
    med = statistics.median
    runs = {n: sorted(glob.glob(f"{out}/{n}-*.json"),
                      key=lambda p: int(re.findall(r"-(\d+)\.json$", p)[0])) for n in names}
    val: dict[str, dict[str, list[float]]] = {n: {m: [] for m in METRICS} for n in names}
    samples: dict[str, dict[str, list[float]]] = {n: {m: [] for m in METRICS} for n in names}
    for n in names:
        for path in runs[n]:
            with open(path) as f:
                results = json.load(f)["results"]
            for m in METRICS:
                if m in results:
                    val[n][m].append(results[m]["value"])
                    samples[n][m].extend(results[m]["samples"])
    print(f"runs per checkout: {[len(runs[n]) for n in names]}")
    for m in METRICS:
        print(f"\n{m}: run values (median of 3 fresh processes), s")
        for n in names:
            print(f"  {n:7s} " + " ".join(f"{x:.3f}" for x in val[n][m])
                  + f"   | median of runs {med(val[n][m]):.3f}"
                  f"  pooled samples median {med(samples[n][m]):.3f}")
        if "d6" in names:
            for n in names:
                if n != "d6":
                    print(f"  d6/{n}: median of runs {med(val['d6'][m]) / med(val[n][m]):.2f}x, "
                          f"pooled samples {med(samples['d6'][m]) / med(samples[n][m]):.2f}x")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2].split(","))
