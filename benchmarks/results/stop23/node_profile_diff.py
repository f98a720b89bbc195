"""Python calls per placement group in the node, main vs d6, from node_profile_sitecustomize
dumps of runs of 100 and 600 groups: python node_profile_diff.py DIR (files out-TREE-N.PID).
Run, per tree: NODE_PROF_OUT=DIR/out-TREE-N PYTHONPATH=TREE:THIS_FOLDER python cost_probe.py
pg_create_remove N (a copy of node_profile_sitecustomize.py named sitecustomize.py here)."""

import glob
import pstats
import sys


def load(pattern: str) -> dict:
    return dict(pstats.Stats(glob.glob(pattern)[0]).stats)  # type: ignore[attr-defined]


def per_group(folder: str, tree: str, n1: int = 100, n2: int = 600) -> dict:
    a, b = load(f"{folder}/out-{tree}-{n1}.*"), load(f"{folder}/out-{tree}-{n2}.*")
    return {k: (v[1] - a.get(k, (0, 0))[1]) / (n2 - n1) for k, v in b.items()}


for tree in ("main", "d6"):
    calls = per_group(sys.argv[1], tree)
    print(f"== {tree}: {sum(calls.values()):.0f} calls per group")
    for key, c in sorted(calls.items(), key=lambda x: -x[1]):
        if c >= 0.9:
            where = key[0].split("zmesh/")[-1].split("site-packages/")[-1]
            print(f"  {c:7.1f} calls  {where}:{key[1]} {key[2]}")
