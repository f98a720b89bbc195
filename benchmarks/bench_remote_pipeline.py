"""A two-node tcp mesh on this machine: the driver talks to an actor and tasks on the node
it is not attached to, so every message crosses a CURVE-encrypted tcp connection.

Figures: pipelined actor calls (N calls submitted, then one get; then the same with an
ObjectRef argument, which the driver's event loop sends), pipelined tasks pinned to
the remote node, and synchronous actor calls (get after each call), each as calls/s and CPU
core-seconds per 1,000 calls summed over the driver, both nodes and their workers (the
figure that load elsewhere on the machine disturbs least). Set ZMESH_COALESCE=0 to measure
without coalescing (`transports.zmq_batch`); the nodes and workers inherit it.

    python benchmarks/bench_remote_pipeline.py [--calls 5000] [--sync 500] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from typing import Any

import psutil

import zmesh
from zmesh.runtime import context
from zmesh.testing import Cluster
from zmesh.util.scheduling_strategies import NodeAffinitySchedulingStrategy


@zmesh.remote
class Echo:
    def ping(self, x: int) -> int:
        return x


@zmesh.remote
def square(x: int) -> int:
    return x * x


@zmesh.remote
def where() -> str:
    return zmesh.get_runtime_context().get_node_id()


def _cpu() -> float:
    """CPU seconds used so far by this process and all its descendants still alive."""
    total = 0.0
    me = psutil.Process()
    for proc in [me, *me.children(recursive=True)]:
        try:
            t = proc.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def _measure(fn: Callable[[], int]) -> tuple[float, float]:
    """(calls per second, CPU core-seconds per 1,000 calls) of one run of `fn`."""
    cpu, started = _cpu(), time.perf_counter()
    calls = fn()
    wall, used = time.perf_counter() - started, _cpu() - cpu
    return calls / wall, used / calls * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=5000, help="pipelined calls per run")
    parser.add_argument("--sync", type=int, default=500, help="synchronous calls per run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", default=None, help="write every round's figures here")
    args = parser.parse_args()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1},
                      shutdown_at_exit=False)
    try:
        remote = cluster.add_node(num_cpus=2)
        cluster.connect()
        pin = NodeAffinitySchedulingStrategy(remote.node_id, soft=False)
        assert zmesh.get(where.options(scheduling_strategy=pin).remote()) == remote.node_id
        actor: Any = Echo.options(scheduling_strategy=pin).remote()  # type: ignore[attr-defined]
        zmesh.get(actor.ping.remote(0))
        zmesh.get([square.options(scheduling_strategy=pin).remote(i) for i in range(50)])

        def actor_pipelined() -> int:
            refs = [actor.ping.remote(i) for i in range(args.calls)]
            assert zmesh.get(refs) == list(range(args.calls))
            return args.calls

        arg = zmesh.put(7)

        def actor_ref_args() -> int:  # a ref argument: the driver's loop sends these calls
            refs = [actor.ping.remote(arg) for _ in range(args.calls)]
            assert zmesh.get(refs) == [7] * args.calls
            return args.calls

        def tasks_pipelined() -> int:
            n = args.calls // 2
            refs = [square.options(scheduling_strategy=pin).remote(i) for i in range(n)]
            assert zmesh.get(refs) == [i * i for i in range(n)]
            return n

        def actor_sync() -> int:
            for i in range(args.sync):
                assert zmesh.get(actor.ping.remote(i)) == i
            return args.sync

        rounds: dict[str, list[tuple[float, float]]] = {
            "actor calls, pipelined": [], "actor calls, ref arg": [], "tasks, pipelined": [],
            "actor calls, sync": []}
        for _ in range(args.rounds):
            rounds["actor calls, pipelined"].append(_measure(actor_pipelined))
            rounds["actor calls, ref arg"].append(_measure(actor_ref_args))
            rounds["tasks, pipelined"].append(_measure(tasks_pipelined))
            rounds["actor calls, sync"].append(_measure(actor_sync))
        coalesce = os.environ.get("ZMESH_COALESCE", "1") != "0"
        print(f"two-node tcp mesh, driver -> remote node; coalescing "
              f"{'on' if coalesce else 'off'}; best of {args.rounds} rounds (calls/s), median "
              f"CPU core-ms per call; load average {os.getloadavg()[0]:.1f}")
        for name, figures in rounds.items():
            best = max(f[0] for f in figures)
            cpu = sorted(f[1] for f in figures)[len(figures) // 2]
            print(f"  {name:<24}{best:>10,.0f} /s   {cpu:>7.3f} core-ms/call")
        # How much went in batches: the driver's endpoint and each node's (its metrics).
        driver = context.current_client().endpoint
        coalesced = {"driver": {k: getattr(driver, k, 0) for k in ("batches_sent",
                                                                     "batched_messages")}}
        for label, node in (("head node", cluster.head_node), ("remote node", remote)):
            if node is not None:
                coalesced[label] = cluster.query(node, "metrics").get("coalesced", {})
        print("  batches sent / messages in them: " + "; ".join(
            f"{who} {c.get('batches_sent', 0):,} / {c.get('batched_messages', 0):,}"
            for who, c in coalesced.items()))
        if args.json:
            with open(args.json, "w") as out:
                json.dump({"coalesce": coalesce, "rounds": rounds, "coalesced": coalesced},
                          out, indent=1)
    finally:
        if zmesh.is_initialized():
            zmesh.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main()
