"""Table of instructions and CPU per operation from cost_run.py's rows: python analyze.py ROWS.jsonl..."""

import json
import sys
from collections import defaultdict

rows = []
for name in sys.argv[1:]:
    with open(name) as fh:
        rows.extend(json.loads(line) for line in fh)
valgrind = defaultdict(dict)  # (workload, pair, tree) -> {n: row}
cpu = defaultdict(dict)  # (workload, pair) -> {tree: row}
for r in rows:
    if r.get("failed") or r["rc"]:
        continue
    if r["mode"] == "cpu":
        cpu[(r["workload"], r["pair"])][r["tree"]] = r
    else:
        valgrind[(r["workload"], r["pair"], r["tree"])][r["n"]] = r


def roles(r: dict) -> dict:
    """Instructions by role: the driver, the node (the driver's first child: lowest pid of
    the rest, pids permitting), everything else (fork server, workers)."""
    procs = r["procs"]
    out = {"driver": sum(i for _, k, i in procs if k == "driver")}
    mesh = [(p, i) for p, k, i in procs if k != "driver"]
    out["mesh"] = sum(i for _, i in mesh)
    return out


workloads = sorted({k[0] for k in valgrind} | {k[0] for k in cpu})
print("| workload | pair | main instr/op | d6 instr/op | main/d6 | main driver / mesh | d6 driver / mesh | "
      "main CPU us/op | d6 CPU us/op | CPU main/d6 |")
print("|---|---|---|---|---|---|---|---|---|---|")
for w in workloads:
    pairs = sorted({k[1] for k in valgrind if k[0] == w} | {k[1] for k in cpu if k[0] == w})
    for pair in pairs:
        cells = {}
        for tree in ("main", "d6"):
            runs = valgrind.get((w, pair, tree), {})
            if len(runs) == 2:
                (n1, a), (n2, b) = sorted(runs.items())
                ra, rb = roles(a), roles(b)
                cells[tree] = ((b["ir"] - a["ir"]) / (n2 - n1),
                               {k: (rb[k] - ra[k]) / (n2 - n1) for k in ra})
        c = cpu.get((w, pair), {})
        cu = {t: c[t]["cpu_ns"] / c[t]["n"] / 1e3 for t in c if "cpu_ns" in c[t]}

        def f(x):
            return f"{x / 1e3:,.1f}k" if x is not None else "-"
        m, d = cells.get("main"), cells.get("d6")
        ratio = f"{m[0] / d[0]:.3f}" if m and d else "-"

        def split(v):
            return f"{f(v[1]['driver'])} / {f(v[1]['mesh'])}" if v else "-"
        cr = f"{cu['main'] / cu['d6']:.3f}" if "main" in cu and "d6" in cu else "-"
        print(f"| {w} | {pair} | {f(m[0]) if m else '-'} | {f(d[0]) if d else '-'} | {ratio} | {split(m)} | "
              f"{split(d)} | {cu.get('main', float('nan')):.1f} | {cu.get('d6', float('nan')):.1f} | {cr} |")
