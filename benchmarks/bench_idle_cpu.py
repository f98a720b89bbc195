"""CPU an idle mesh burns: utime+stime of each process over a window, with nothing to do.

Two setups, each measured after a warm-up:

- `init`: `zmesh.init()` (a private node with its prestarted workers) and the driver;
- `cluster`: a 2-node `zmesh.testing.Cluster` (tcp + CURVE between the nodes, no driver).

Reported per process kind, in ms of CPU per second of wall time. Run it from the checkout
to measure (the nodes import zmesh from the driver's cwd); for a before/after comparison,
alternate two checkouts in one sitting:

    for i in 1 2 3; do
      (cd /work/main && .venv/bin/python benchmarks/bench_idle_cpu.py --tag main)
      (cd /work/wt-x && /work/main/.venv/bin/python benchmarks/bench_idle_cpu.py --tag wt)
    done
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.getcwd())

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """utime+stime of one process (all its threads), in seconds; 0 if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS


def children(pid: int) -> list[int]:
    """Every descendant of `pid` (workers, the fork server)."""
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                kids = [int(k) for k in f.read().split()]
        except OSError:
            continue
        for kid in kids:
            out.append(kid)
            out.extend(children(kid))
    return out


def measure(groups: dict[str, list[int]], seconds: float) -> dict[str, float]:
    """ms of CPU per wall second for each group of pids over `seconds`."""
    before = {name: sum(cpu_s(p) for p in pids) for name, pids in groups.items()}
    start = time.monotonic()
    time.sleep(seconds)
    wall = time.monotonic() - start
    after = {name: sum(cpu_s(p) for p in pids) for name, pids in groups.items()}
    return {name: round((after[name] - before[name]) * 1000 / wall, 2) for name in groups}


def run_init(seconds: float, warmup: float) -> dict[str, float]:
    import zmesh

    zmesh.init(num_cpus=2)
    try:
        node_pid = next(int(n["Pid"]) for n in zmesh.nodes())
        time.sleep(warmup)
        workers = children(node_pid)
        return measure({"node": [node_pid], "workers": workers, "driver": [os.getpid()]},
                       seconds) | {"n_workers": len(workers)}
    finally:
        zmesh.shutdown()


def run_cluster(seconds: float, warmup: float) -> dict[str, float]:
    from zmesh.testing import Cluster

    c = Cluster(initialize_head=True)
    try:
        c.add_node(num_cpus=1)
        c.wait_for_nodes()
        time.sleep(warmup)
        nodes = [n.pid for n in c.list_all_nodes()]
        workers = [k for p in nodes for k in children(p)]
        return measure({"node0": nodes[:1], "node1": nodes[1:], "workers": workers},
                       seconds) | {"n_workers": len(workers)}
    finally:
        c.shutdown()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--setup", choices=["init", "cluster", "both"], default="both")
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument("--tag", default=os.path.basename(os.getcwd()))
    a = ap.parse_args()
    setups = ["init", "cluster"] if a.setup == "both" else [a.setup]
    for setup in setups:
        fn = run_init if setup == "init" else run_cluster
        row = {"tag": a.tag, "setup": setup, "load1": os.getloadavg()[0],
               **fn(a.seconds, a.warmup)}
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
