"""LocalScheduler hot paths: submit + finish per second, and placement-group create + remove.

    python benchmarks/bench_scheduler.py            # a few seconds
    python benchmarks/bench_scheduler.py --quick    # about a second

Cases: a default 1-CPU task on a free node (the short path), a 0.5-GPU task (ids picked),
a saturated node (every submit queues, every finish starts the next one), a queue with
four shapes waiting, a task forwarded to another node, and a 4-bundle group.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from zmesh.core.resources import NodeResources
from zmesh.core.scheduler import LocalScheduler
from zmesh.core.scheduling import Request


def _ids(n: int) -> list[bytes]:
    return [i.to_bytes(8, "big") for i in range(n)]


def idle_default(n: int) -> float:
    s = LocalScheduler("a", {"CPU": 8})
    reqs = [Request(w) for w in _ids(n)]
    start = time.perf_counter()
    for req in reqs:
        s.submit(req)
        s.finish(req.work_id)
    return time.perf_counter() - start


def idle_fractional_gpu(n: int) -> float:
    s = LocalScheduler("a", {"CPU": 8, "GPU": 4})
    shape = {"CPU": 0.5, "GPU": 0.5}
    reqs = [Request(w, resources=shape) for w in _ids(n)]
    start = time.perf_counter()
    for req in reqs:
        s.submit(req)
        s.finish(req.work_id)
    return time.perf_counter() - start


def saturated(n: int) -> float:
    s = LocalScheduler("a", {"CPU": 4})
    reqs = [Request(w) for w in _ids(n + 4)]
    for req in reqs[:4]:
        s.submit(req)
    start = time.perf_counter()
    for i, req in enumerate(reqs[4:]):
        s.submit(req)  # queues: the node is full
        s.finish(reqs[i].work_id)  # starts the oldest waiting task
    return time.perf_counter() - start


def mixed_shapes_queue(n: int) -> float:
    s = LocalScheduler("a", {"CPU": 4, "GPU": 1})
    shapes = [None, {"CPU": 2}, {"CPU": 1, "GPU": 1}, {"CPU": 0.5}]
    reqs = [Request(w, resources=shapes[i % 4]) for i, w in enumerate(_ids(n + 8))]
    running: list[bytes] = []
    for req in reqs[:8]:
        running += [d.work_id for d in s.submit(req) if hasattr(d, "gpu_ids")]
    start = time.perf_counter()
    for req in reqs[8:]:
        running += [d.work_id for d in s.submit(req) if hasattr(d, "gpu_ids")]
        running += [d.work_id for d in s.finish(running.pop(0)) if hasattr(d, "gpu_ids")]
    return time.perf_counter() - start


def forwarded(n: int) -> float:
    s = LocalScheduler("a", {"CPU": 0})
    s.update_cluster({"b": NodeResources.of({"CPU": 10**6})})
    reqs = [Request(w, arg_locality={"b": 100}) for w in _ids(n)]
    start = time.perf_counter()
    for req in reqs:
        s.submit(req)
    return time.perf_counter() - start


def placement_group(n: int) -> float:
    s = LocalScheduler("a", {"CPU": 8, "GPU": 4})
    bundles = [{"CPU": 1, "GPU": 1}] * 4
    start = time.perf_counter()
    for i in range(n):
        s.create_placement_group(f"pg{i}", bundles, "PACK")
        s.remove_placement_group(f"pg{i}")
    return time.perf_counter() - start


CASES: list[tuple[str, Callable[[int], float], int]] = [
    ("submit+finish, 1 CPU, idle node", idle_default, 200_000),
    ("submit+finish, 0.5 CPU + 0.5 GPU", idle_fractional_gpu, 50_000),
    ("submit+finish, saturated (queue)", saturated, 50_000),
    ("submit+finish, 4 shapes queued", mixed_shapes_queue, 20_000),
    ("submit, forwarded to another node", forwarded, 50_000),
    ("PG create+remove, 4 bundles", placement_group, 10_000),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a tenth of the iterations")
    args = parser.parse_args()
    print(f"{'case':<38} {'ops/s':>12} {'us/op':>8}")
    for name, fn, n in CASES:
        n = n // 10 if args.quick else n
        fn(min(n, 1000))  # warm up
        best = min(fn(n) for _ in range(3))
        print(f"{name:<38} {n / best:>12,.0f} {best / n * 1e6:>8.2f}")


if __name__ == "__main__":
    main()
