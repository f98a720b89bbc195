"""The control store's sans-IO cores on SimNet: write cost, messages per write, shard moves.

Measures, per cluster size: CPU time of the cores per acknowledged put (with SimNet's own
overhead included, so an upper bound), messages sent per put (request, R-1 replications,
R-1 acks, reply), simulated latency of a put, and for a join and for a crash the simulated
time until every member is settled again, with the keys moved and the wall time spent.

    python benchmarks/bench_control_store.py            # ~30 seconds
    python benchmarks/bench_control_store.py --quick    # a few seconds
"""

from __future__ import annotations

import argparse
import time

from zmesh.store.control_sim import StoreCluster


def measure(n: int, keys: int, puts: int, seed: int = 0) -> dict[str, float]:
    names = [f"n{i}" for i in range(n)]
    cluster = StoreCluster(names, seed=seed)
    cluster.settle()
    # Fill the store, then time a batch of puts spread over clients and keys.
    fill = [cluster.call(names[i % n], lambda s, t, i=i: s.put(t, f"actor/{i}", b"x" * 64))
            for i in range(keys)]
    for i, rid in enumerate(fill):
        cluster.wait(names[i % n], rid)
    sent_before = sum(cluster.net.sent.values())
    sim_before = cluster.now
    wall = time.perf_counter()
    rids = [cluster.call(names[i % n], lambda s, t, i=i: s.put(t, f"actor/{i % keys}", b"y" * 64))
            for i in range(puts)]
    for i, rid in enumerate(rids):
        assert cluster.wait(names[i % n], rid).ok
    put_wall = time.perf_counter() - wall
    msgs = (sum(cluster.net.sent.values()) - sent_before) / puts
    latency = cluster.now - sim_before

    # A join: how long until the new member has its shards and the old owners let go.
    before = {name: len(cluster.stores[name].local_records()) for name in names}
    wall = time.perf_counter()
    t0 = cluster.now
    cluster.join("newcomer")
    cluster.settle(step=0.001)
    join_sim = cluster.now - t0
    join_wall = time.perf_counter() - wall
    moved = len(cluster.stores["newcomer"].local_records())
    dropped = sum(before[m] - len(cluster.stores[m].local_records()) for m in names)

    # A crash of two members (detected at once): time until re-replicated.
    wall = time.perf_counter()
    t0 = cluster.now
    cluster.crash(names[1], detect=False)
    cluster.crash(names[2], detect=False)
    cluster.detect(names[1], names[2])
    cluster.settle(step=0.001)
    crash_sim = cluster.now - t0
    crash_wall = time.perf_counter() - wall
    return {
        "us_per_put": put_wall / puts * 1e6,
        "msgs_per_put": msgs,
        "batch_sim_ms": latency * 1e3,
        "join_sim_ms": join_sim * 1e3,
        "join_wall_ms": join_wall * 1e3,
        "moved": moved,
        "dropped": dropped,
        "crash_sim_ms": crash_sim * 1e3,
        "crash_wall_ms": crash_wall * 1e3,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, a few seconds")
    args = parser.parse_args()
    sizes = [(3, 1000, 2000), (10, 3000, 3000)] if args.quick else [
        (3, 2000, 10000), (10, 10000, 10000), (30, 20000, 10000)
    ]
    header = (f"{'members':>7} {'keys':>6} {'us/put':>7} {'msgs/put':>8} {'join ms':>8} "
              f"{'moved':>6} {'dropped':>7} {'join wall ms':>12} {'2-crash ms':>10} {'crash wall ms':>13}")
    print(header)
    print("-" * len(header))
    for n, keys, puts in sizes:
        r = measure(n, keys, puts)
        print(f"{n:>7} {keys:>6} {r['us_per_put']:>7.0f} {r['msgs_per_put']:>8.2f} "
              f"{r['join_sim_ms']:>8.1f} {r['moved']:>6.0f} {r['dropped']:>7.0f} "
              f"{r['join_wall_ms']:>12.1f} {r['crash_sim_ms']:>10.1f} {r['crash_wall_ms']:>13.1f}")
    print("\nus/put: CPU per acknowledged put through the cores and SimNet (3 copies).")
    print("join/2-crash ms: simulated time until every member is settled (shards moved, "
          "old copies dropped).")


if __name__ == "__main__":
    main()
