"""What a first contact costs a driver over tcp: ``init(address="tcp://...")`` and the first
call to a new actor (and a first task) on another node.

Each tcp sender's name is proven by its address the first time a process hears from it
(`zmesh.transports.zmq_proof`): one extra connection and round trip per pair of processes.
This times, against a two-node `zmesh.testing.Cluster` on loopback, ``--rounds`` times in one
process after one untimed round (each round a new driver endpoint and a new actor, so every
proof is paid again):

- ``init``: ``zmesh.init(address="tcp://head")`` (``shutdown`` is not timed);
- ``actor``: creating an actor pinned to the other node and its first method call's result;
- ``task``: a first task pinned to the other node (after the actor: the node knows the driver).

Run it once per checkout and alternate the checkouts (A, B, A, B, ...) to compare:

    PYTHONPATH=/path/to/checkout python benchmarks/bench_first_contact.py --rounds 3 --json F
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import zmesh
from zmesh.testing import Cluster
from zmesh.util.scheduling_strategies import NodeAffinitySchedulingStrategy


@zmesh.remote
def ping() -> int:
    return 1


@zmesh.remote
class Echo:
    def echo(self, x: int) -> int:
        return x


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 4})
    times: dict[str, list[float]] = {"init": [], "actor": [], "task": []}
    took: dict[str, float] = {}
    try:
        other = cluster.add_node(num_cpus=4)
        pinned = NodeAffinitySchedulingStrategy(other.node_id, soft=False)
        for round_ in range(args.rounds + 1):  # round 0 warms up, untimed
            started = time.perf_counter()
            zmesh.init(address=f"tcp://{cluster.address}")
            took["init"] = time.perf_counter() - started
            try:
                started = time.perf_counter()
                actor = Echo.options(scheduling_strategy=pinned).remote()
                assert zmesh.get(actor.echo.remote(7), timeout=120) == 7
                took["actor"] = time.perf_counter() - started
                started = time.perf_counter()
                assert zmesh.get(ping.options(scheduling_strategy=pinned).remote(),
                                 timeout=120) == 1
                took["task"] = time.perf_counter() - started
                zmesh.kill(actor)
            finally:
                zmesh.shutdown()
            if round_:
                for name, value in took.items():
                    times[name].append(value)
    finally:
        cluster.shutdown()
    medians = {k: statistics.median(v) * 1000 for k, v in times.items()}
    print(f"{args.rounds} rounds; load {os.getloadavg()[0]:.1f}: " + ", ".join(
        f"{k} median {m:.1f} ms [{min(times[k]) * 1000:.1f}-{max(times[k]) * 1000:.1f}]"
        for k, m in medians.items()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"times_s": times, "median_ms": medians, "zmesh": zmesh.__file__}, f)


if __name__ == "__main__":
    main()
