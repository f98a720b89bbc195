"""Ratios of a sitting's arms (sitting.sh): main / d6d7dde, onestep / d6d7dde, onestep / main.

usage: python ratios.py SITTING_DIR [SITTING_DIR ...]  (higher is better for every metric here)
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

METRICS = ["put_large_gbps", "put_large_p50_gbps", "get_large_gbps", "put_small"]
PAIRS = [("main", "d6"), ("onestep", "d6"), ("onestep", "main")]


def value(path: Path, metric: str) -> float:
    with path.open() as f:
        return float(json.load(f)["results"][metric]["value"])


def main(dirs: list[str]) -> None:
    ratios: dict[tuple[str, str, str], list[float]] = {}
    for d in map(Path, dirs):
        rounds = sorted({int(p.stem.rsplit("-", 1)[1]) for p in d.glob("anchor-*-*.json")})
        for i in rounds:
            files = {arm: d / f"anchor-{arm}-{i}.json" for arm in ("d6", "main", "onestep")}
            if not all(f.exists() for f in files.values()):
                continue
            cells = []
            for metric in METRICS:
                v = {arm: value(f, metric) for arm, f in files.items()}
                cells.append(f"{metric} " + " ".join(f"{v[a]:.2f}" for a in ("d6", "main", "onestep")))
                for a, b in PAIRS:
                    ratios.setdefault((metric, a, b), []).append(v[a] / v[b])
            print(f"{d.name} #{i}: " + " | ".join(cells))
    print("\nmedian ratio over alternations (each alternation's ratios in brackets)")
    for metric in METRICS:
        for a, b in PAIRS:
            r = ratios.get((metric, a, b), [])
            if r:
                shown = " ".join(f"{x:.2f}" for x in r)
                print(f"{metric:20s} {a:>7s}/{b:<4s} {statistics.median(r):.3f}  [{shown}]")


if __name__ == "__main__":
    main(sys.argv[1:])
