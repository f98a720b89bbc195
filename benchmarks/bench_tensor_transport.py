"""Moving a tensor actor -> actor: the object store vs the tensor transport vs raw
torch.distributed send/recv between two plain processes; and allreduce in a zmesh
collective group vs raw torch.distributed. gloo on CPU here (nccl when a GPU is there).

Each figure is the median time of one transfer of one float32 tensor of the given size,
timed in the consumer: `zmesh.get(ref)` inside the consuming actor (object store: the same
node maps the producer's object, zero-copy; transport: a request to the producer, then
gloo send/recv), and for raw one send/recv pair between two plain processes. Allreduce is
timed inside the members.

    python benchmarks/bench_tensor_transport.py            # 4 KB ... 1 GB
    python benchmarks/bench_tensor_transport.py --quick    # 4 KB ... 64 MB, fewer reps
"""

from __future__ import annotations

import argparse
import datetime
import multiprocessing as mp
import statistics
import time

import torch

import zmesh
import zmesh.collective as col

SIZES = [4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30]


@zmesh.remote
class Producer:
    def make(self, nbytes: int):
        return torch.ones(nbytes // 4, dtype=torch.float32)

    @zmesh.method(tensor_transport="gloo")
    def make_kept(self, nbytes: int):
        return torch.ones(nbytes // 4, dtype=torch.float32)


@zmesh.remote
class Consumer:
    def pull(self, refs: list, reps: int) -> float:
        """Median time of fetching the (nested, so unresolved) ref here, after a warm-up."""
        zmesh.get(refs[0])
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            value = zmesh.get(refs[0])
            times.append(time.perf_counter() - start)
            del value
        return statistics.median(times)


@zmesh.remote
class Member:
    def __init__(self, rank: int) -> None:
        self.rank = rank

    def allreduce(self, nbytes: int, reps: int) -> list[float]:
        t = torch.ones(nbytes // 4)
        col.allreduce(t, "bench")  # warm up (and join the declared group)
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            col.allreduce(t, "bench")
            times.append(time.perf_counter() - start)
        return times


def _raw_peer(rank: int, port: int, sizes: list[int], reps: int, out: mp.Queue) -> None:
    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", port, 2, rank == 0, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=300))
    pg = dist.ProcessGroupGloo(store, rank, 2, datetime.timedelta(seconds=300))
    results: dict[str, dict[int, float]] = {"p2p": {}, "allreduce": {}}
    for nbytes in sizes:
        t = torch.ones(nbytes // 4)
        times = []
        for _ in range(reps + 1):
            pg.barrier().wait()
            start = time.perf_counter()
            if rank == 0:
                pg.send([t], 1, 0).wait()
            else:
                pg.recv([t], 0, 0).wait()
            times.append(time.perf_counter() - start)
        results["p2p"][nbytes] = statistics.median(times[1:])
        pg.allreduce([t]).wait()
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            pg.allreduce([t]).wait()
            times.append(time.perf_counter() - start)
        results["allreduce"][nbytes] = statistics.median(times)
    if rank == 1:
        out.put(results)


def raw(sizes: list[int], reps: int) -> dict[str, dict[int, float]]:
    import torch.distributed as dist

    probe = dist.TCPStore("127.0.0.1", 0, 1, True, wait_for_workers=False)  # type: ignore[attr-defined]
    port = probe.port
    del probe
    ctx = mp.get_context("spawn")
    out: mp.Queue = ctx.Queue()
    procs = [ctx.Process(target=_raw_peer, args=(r, port, sizes, reps, out)) for r in range(2)]
    for p in procs:
        p.start()
    results = out.get(timeout=1200)
    for p in procs:
        p.join(timeout=60)
    return results  # type: ignore[no-any-return]


def fmt_size(n: int) -> str:
    return f"{n >> 30} GB" if n >= 1 << 30 else f"{n >> 20} MB" if n >= 1 << 20 else \
        f"{n >> 10} KB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="sizes up to 64 MB, fewer reps")
    args = parser.parse_args()
    sizes = [s for s in SIZES if s <= (64 << 20)] if args.quick else SIZES
    reps = 3 if args.quick else 5

    baseline = raw(sizes, reps)
    zmesh.init(num_cpus=4, object_store_memory=3 << 30)
    producer, consumer = Producer.remote(), Consumer.remote()
    members = [Member.remote(r) for r in range(2)]
    col.create_collective_group(members, 2, [0, 1], backend="gloo", group_name="bench")

    print(f"{'size':>7} | {'object store':>12} | {'transport':>10} | {'raw p2p':>9} | "
          f"{'transport/raw':>13} | {'allreduce':>10} | {'raw allred':>10} | {'ratio':>6}")
    for nbytes in sizes:
        plain = producer.make.remote(nbytes)
        kept = producer.make_kept.remote(nbytes)
        zmesh.wait([plain, kept], num_returns=2)
        t_store = zmesh.get(consumer.pull.remote([plain], reps))
        t_tt = zmesh.get(consumer.pull.remote([kept], reps))
        del plain, kept
        ar = zmesh.get([m.allreduce.remote(nbytes, reps) for m in members])
        t_ar = statistics.median(ar[0] + ar[1])
        t_raw, t_raw_ar = baseline["p2p"][nbytes], baseline["allreduce"][nbytes]
        print(f"{fmt_size(nbytes):>7} | {t_store * 1e3:9.2f} ms | {t_tt * 1e3:7.2f} ms | "
              f"{t_raw * 1e3:6.2f} ms | {t_tt / t_raw:12.2f}x | {t_ar * 1e3:7.2f} ms | "
              f"{t_raw_ar * 1e3:7.2f} ms | {t_ar / t_raw_ar:5.2f}x", flush=True)
    zmesh.shutdown()


if __name__ == "__main__":
    main()
