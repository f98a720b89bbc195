"""Crash detection on real processes: N nodes on this machine, one SIGKILLed; seconds until
each other node counts it dead (polled through node queries every 20 ms).

    python benchmarks/bench_mesh_crash.py [--nodes 5] [--rounds 3] [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import time

from zmesh.testing import Cluster


def one_round(n: int) -> list[float]:
    cluster = Cluster(initialize_head=True)
    try:
        for _ in range(n - 1):
            cluster.add_node(num_cpus=1, wait=False)
        cluster.wait_for_nodes()
        victim = cluster.list_all_nodes()[-1]
        others = [x for x in cluster.list_all_nodes() if x is not victim]
        cluster.kill_node(victim)
        t0 = time.monotonic()
        seen: dict[str, float] = {}
        while len(seen) < len(others) and time.monotonic() - t0 < 30:
            for node in others:
                if node.node_id not in seen and victim.node_id not in cluster.live_view(node):
                    seen[node.node_id] = time.monotonic() - t0
            time.sleep(0.02)
        return sorted(seen.values())
    finally:
        cluster.shutdown()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    rounds = 1 if a.quick else a.rounds
    print(f"{'round':>5} {'nodes':>5} {'first (s)':>10} {'all (s)':>8}")
    alls = []
    for r in range(rounds):
        times = one_round(a.nodes)
        alls.append(times[-1])
        print(f"{r:>5} {a.nodes:>5} {times[0]:>10.2f} {times[-1]:>8.2f}")
    print(f"median time until every node knew: {statistics.median(alls):.2f} s")


if __name__ == "__main__":
    main()
