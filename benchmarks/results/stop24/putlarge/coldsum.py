"""Per-arm medians of a cold.sh file: warm-up (fresh space) and timed (reused space) puts.

usage: python coldsum.py COLD_FILE
"""

from __future__ import annotations

import re
import statistics
import sys

LINE = re.compile(r"warm-up put p50 ([\d.]+) ms \(alloc p50 ([\d.]+) ms\); "
                  r"timed put p50 ([\d.]+) ms \(alloc p50 ([\d.]+) ms\)")
FIELDS = ["warm-up put", "warm-up alloc", "timed put", "timed alloc"]


def main(path: str) -> None:
    runs: dict[str, list[tuple[float, ...]]] = {}
    arm = ""
    with open(path) as f:
        for line in f:
            head = line.split()
            if head and head[0].isdigit() and len(head) > 1:
                arm = head[1]
                continue
            hit = LINE.search(line)
            if hit:
                runs.setdefault(arm, []).append(tuple(float(x) for x in hit.groups()))
    print("median over alternations, ms (each alternation's in brackets)")
    for arm, rows in runs.items():
        for k, name in enumerate(FIELDS):
            col = [r[k] for r in rows]
            shown = " ".join(f"{x:.1f}" for x in col)
            print(f"{arm:8s} {name:14s} {statistics.median(col):7.2f}  [{shown}]")


if __name__ == "__main__":
    main(sys.argv[1])
