"""End-to-end cross-node reads: `get` in the driver of a large value a task made on another node.

A 2-node zmesh.testing.Cluster on loopback; the driver is on the head. Each round a task on
the other node returns a fresh array; once it is ready, the timed `get` pins it at the
head, which pulls it from the other node in chunks into its store and answers with the local
copy, and the driver maps it (no copy). For scale, the same `get` of a value made on the
driver's own node (no transfer). The raw transfer machinery is measured alone by
bench_object_transfer.py.

    python benchmarks/bench_mesh_objects.py [--quick] [--size-mb N] [--rounds N]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import zmesh
from zmesh.testing import Cluster
from zmesh.util.scheduling_strategies import NodeAffinitySchedulingStrategy

MiB = 1 << 20


@zmesh.remote
def make(nbytes: int) -> np.ndarray:
    return np.ones(nbytes, dtype=np.uint8)


def timed_get(node_id: str, nbytes: int) -> float:
    strategy = NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)
    ref = make.options(scheduling_strategy=strategy).remote(nbytes)
    zmesh.wait([ref], timeout=120)
    t0 = time.perf_counter()
    arr = zmesh.get(ref, timeout=120)
    dt = time.perf_counter() - t0
    assert arr.nbytes == nbytes and arr[-1] == 1
    del arr, ref
    return dt


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="64 MB, 3 rounds")
    p.add_argument("--size-mb", type=int, default=1024)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    size_mb, rounds = (64, 3) if a.quick else (a.size_mb, a.rounds)
    nbytes = size_mb * MiB
    store = max(4 * nbytes, 256 * MiB)
    cluster = Cluster(initialize_head=True,
                      head_node_args={"num_cpus": 1, "object_store_memory": store})
    other = cluster.add_node(num_cpus=1, object_store_memory=store)
    try:
        zmesh.init(address=cluster.address)
        head = zmesh.get_runtime_context().get_node_id()
        rows = []
        for label, node_id in (("made on the other node (pull)", other.node_id),
                               ("made on the driver's node", head)):
            times = [timed_get(node_id, nbytes) for _ in range(rounds + 1)][1:]  # warm-up
            best, med = min(times), statistics.median(times)
            rows.append((label, best, med, nbytes / best / 1e9))
        print(f"get() of a {size_mb} MiB array in the driver, {rounds} rounds after a warm-up")
        print(f"{'value':<32}{'best s':>10}{'median s':>10}{'GB/s (best)':>13}")
        for label, best, med, gbps in rows:
            print(f"{label:<32}{best:>10.4f}{med:>10.4f}{gbps:>13.2f}")
    finally:
        zmesh.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main()
