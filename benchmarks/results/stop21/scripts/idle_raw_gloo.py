"""CPU and wake-ups of an idle gloo group's threads in two plain torch processes (5 s), to
compare with idle_group_threads.py. Run from the repository root with PYTHONPATH=benchmarks.

    PYTHONPATH=benchmarks python benchmarks/results/stop21/scripts/idle_raw_gloo.py
"""

import datetime
import multiprocessing as mp
import time
from typing import Any


def peer(rank: int, port: int, q: Any) -> None:
    import torch
    import torch.distributed as dist
    from bench_collective import threads_now

    store = dist.TCPStore("127.0.0.1", port, 2, rank == 0, wait_for_workers=False)
    pg = dist.ProcessGroupGloo(store, rank, 2, datetime.timedelta(seconds=60))
    pg.allreduce([torch.ones(1 << 18)]).wait()
    pg.barrier().wait()
    before = threads_now()
    time.sleep(5)  # the idle window being measured, not a synchronization
    after = threads_now()
    kinds: dict[str, list[float]] = {}
    for tid, (kind, run, slices) in after.items():
        _, run0, slices0 = before.get(tid, (kind, 0, 0))
        acc = kinds.setdefault(kind, [0.0, 0.0])
        acc[0] += (run - run0) / 5e6
        acc[1] += (slices - slices0) / 5
    q.put((rank, kinds))
    pg.barrier().wait()


if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=peer, args=(r, 29533, q)) for r in range(2)]
    for p in procs:
        p.start()
    for _ in range(2):
        rank, kinds = q.get(timeout=60)
        print(f"rank {rank} (ms/s, wake-ups/s): "
              + ", ".join(f"{k} {v[0]:.2f}/{v[1]:.1f}" for k, v in kinds.items()))
    for p in procs:
        p.join()
