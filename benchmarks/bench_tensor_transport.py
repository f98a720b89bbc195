"""Moving a tensor actor -> actor: the object store vs the tensor transport vs raw
torch.distributed send/recv between two plain processes; and allreduce in a zmesh
collective group vs raw torch.distributed. gloo on CPU here (nccl when a GPU is there).

Each figure is the median time of one transfer of one float32 tensor of the given size,
timed in the consumer: `zmesh.get(ref)` inside the consuming actor (object store: the same
node maps the producer's object, zero-copy; transport: a request to the producer, then
gloo send/recv), and for raw one send/recv pair between two plain processes. "raw
req/reply" is the floor of any pull, in plain processes: a small request, then a status and
the tensor back (the transport's hops without zmesh). Allreduce is timed inside the members.
Both raw receivers reuse one warm buffer; the transport receives into pooled warm blocks.

Like with like: every column moves the same tensor the same number of times (one warm-up,
then --reps, median), timed in the receiver, with no rendezvous and no actor call inside
the timed span (the transport's includes reading the descriptor from the store: that is
part of its cost). Raw p2p is a push between two processes that a barrier has just woken:
the sender has posted its send when the receiver starts its clock, so it is the floor of
a one-way move, not of a pull; the transport is a pull (the producer does not know who will
read the ref, so the consumer asks, and the producer's thread must wake to answer), whose
floor is raw req/reply. Both are printed. CPU per operation (both processes together,
process_time) is printed too: on a loaded machine it moves far less than wall time.

    python benchmarks/bench_tensor_transport.py            # 4 KB ... 64 MB
    python benchmarks/bench_tensor_transport.py --big      # ... and 256 MB, 1 GB (slow)
    python benchmarks/bench_tensor_transport.py --quick    # 4 KB ... 16 MB, 5 reps (else 11)
    python benchmarks/bench_tensor_transport.py --rounds 3 # whole table 3 times: medians
                                                           # and min-max spread per cell
    python benchmarks/bench_tensor_transport.py --sizes 1,16,256   # these sizes (MB)

The machine's load average is printed with the table: on a shared machine, compare
columns of one run, not runs.
"""

from __future__ import annotations

import argparse
import datetime
import multiprocessing as mp
import os
import statistics
import time

import torch

import zmesh
import zmesh.collective as col

SIZES = [4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20]
BIG = [256 << 20, 1 << 30]


@zmesh.remote
class Producer:
    def make(self, nbytes: int):
        return torch.ones(nbytes // 4, dtype=torch.float32)

    @zmesh.method(tensor_transport="gloo")
    def make_kept(self, nbytes: int):
        return torch.ones(nbytes // 4, dtype=torch.float32)

    def cpu(self) -> float:
        return time.process_time()


@zmesh.remote
class Consumer:
    def pull(self, refs: list, reps: int, producer) -> tuple[list[float], float]:
        """Times of fetching the (nested, so unresolved) ref here, after a warm-up, and the
        CPU seconds per transfer of both processes (this one's and the producer's, less what
        asking the producer for its CPU time costs it)."""
        zmesh.get(refs[0])
        probe = [zmesh.get(producer.cpu.remote()) for _ in range(3)]
        call_cpu = min(b - a for a, b in zip(probe, probe[1:]))
        times = []
        cpu0, prod0 = time.process_time(), zmesh.get(producer.cpu.remote())
        for _ in range(reps):
            start = time.perf_counter()
            value = zmesh.get(refs[0])
            times.append(time.perf_counter() - start)
            del value
        prod1, cpu1 = zmesh.get(producer.cpu.remote()), time.process_time()
        return times, (cpu1 - cpu0 + max(0.0, prod1 - prod0 - call_cpu)) / reps


@zmesh.remote
class Member:
    def __init__(self, rank: int) -> None:
        self.rank = rank

    def allreduce(self, nbytes: int, reps: int) -> tuple[list[float], float, list[float]]:
        """Times of one allreduce here, this process's CPU seconds per allreduce, then times
        of torch's own allreduce on the same group in the same processes, call by call
        alternating with zmesh.collective's (what the API itself adds, placement aside)."""
        from zmesh.collective.api import _group

        t = torch.ones(nbytes // 4)
        col.allreduce(t, "bench")  # warm up (and join the declared group)
        times = []
        cpu0 = time.process_time()
        for _ in range(reps):
            start = time.perf_counter()
            col.allreduce(t, "bench")
            times.append(time.perf_counter() - start)
        cpu = (time.process_time() - cpu0) / reps
        pg, paired, raw = _group("bench").pg, [], []
        for _ in range(reps):
            start = time.perf_counter()
            col.allreduce(t, "bench")
            paired.append(time.perf_counter() - start)
            start = time.perf_counter()
            pg.allreduce([t]).wait()
            raw.append(time.perf_counter() - start)
        return times, cpu, [statistics.median(paired), statistics.median(raw)]


def _raw_peer(rank: int, port: int, reps: int, todo: mp.Queue, out: mp.Queue) -> None:
    """One of two plain processes with a gloo group; measures each size it is told to
    (None: stop), so that raw and zmesh cells alternate size by size under the same load."""
    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", port, 2, rank == 0, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=300))
    pg = dist.ProcessGroupGloo(store, rank, 2, datetime.timedelta(seconds=300))
    while (nbytes := todo.get()) is not None:
        results: dict[str, float] = {}
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
        results["p2p"] = statistics.median(times[1:])
        results["p2p_best"] = min(times[1:])
        cpu0 = time.process_time()
        results["rr"] = _raw_request_reply(pg, rank, t, reps)
        results["rr_cpu"] = (time.process_time() - cpu0) / (reps + 1)
        pg.allreduce([t]).wait()
        times = []
        cpu0 = time.process_time()
        for _ in range(reps):
            start = time.perf_counter()
            pg.allreduce([t]).wait()
            times.append(time.perf_counter() - start)
        results["ar_cpu"] = (time.process_time() - cpu0) / reps
        results["allreduce"] = statistics.median(times)
        del t
        out.put((rank, results))


def _raw_request_reply(pg, rank: int, t: torch.Tensor, reps: int) -> float:
    """The floor of any pull: rank 1 posts its receives and asks (a small request), rank 0,
    blocked in a receive, answers a status and the tensor: the transport's hops, in plain
    processes. Median time at rank 1."""
    request = torch.zeros(168, dtype=torch.uint8)
    status = torch.zeros(1, dtype=torch.int64)
    pg.barrier().wait()
    times = []
    for _ in range(reps + 1):
        if rank == 0:
            pg.recv([request], 1, 0).wait()
            works = [pg.send([status], 1, 1), pg.send([t], 1, 2)]
        else:
            start = time.perf_counter()
            works = [pg.recv([status], 0, 1), pg.recv([t], 0, 2), pg.send([request], 0, 0)]
        for work in works:
            work.wait()
        if rank == 1:
            times.append(time.perf_counter() - start)
    return statistics.median(times[1:]) if times else 0.0


class Raw:
    """The two plain processes, kept for the whole run."""

    def __init__(self, reps: int) -> None:
        import torch.distributed as dist

        probe = dist.TCPStore("127.0.0.1", 0, 1, True, wait_for_workers=False)  # type: ignore[attr-defined]
        port = probe.port
        del probe
        ctx = mp.get_context("spawn")
        self.out: mp.Queue = ctx.Queue()
        self.todo = [ctx.Queue() for _ in range(2)]
        self.procs = [ctx.Process(target=_raw_peer, args=(r, port, reps, self.todo[r], self.out))
                      for r in range(2)]
        for p in self.procs:
            p.start()

    def measure(self, nbytes: int) -> dict[str, float]:
        """Rank 1's times; CPU figures summed over both ranks."""
        for q in self.todo:
            q.put(nbytes)
        got = dict(self.out.get(timeout=1200) for _ in range(2))
        out = dict(got[1])
        for key in ("rr_cpu", "ar_cpu"):
            out[key] = got[0][key] + got[1][key]
        return out

    def stop(self) -> None:
        for q in self.todo:
            q.put(None)
        for p in self.procs:
            p.join(timeout=60)


def fmt_size(n: int) -> str:
    return f"{n >> 30} GB" if n >= 1 << 30 else f"{n >> 20} MB" if n >= 1 << 20 else \
        f"{n >> 10} KB"


def cell(values: list[float], scale: float = 1e3) -> str:
    """median [min-max] of one cell over the rounds."""
    med = statistics.median(values) * scale
    if len(values) == 1:
        return f"{med:.2f}"
    return f"{med:.2f} [{min(values) * scale:.2f}-{max(values) * scale:.2f}]"


def one_round(sizes: list[int], reps: int, raw: Raw, producer, consumer,
              members) -> tuple[dict[str, dict[int, float]], dict[str, dict[int, float]]]:
    """Every size: raw first, then zmesh's cells, within seconds of each other."""
    base: dict[str, dict[int, float]] = {"p2p": {}, "p2p_best": {}, "rr": {}, "allreduce": {},
                                         "rr_cpu": {}, "ar_cpu": {}}
    out: dict[str, dict[int, float]] = {"store": {}, "tt": {}, "tt_best": {}, "ar": {},
                                        "tt_cpu": {}, "ar_cpu": {}, "ar_api": {}, "ar_pg": {}}
    for nbytes in sizes:
        for k, v in raw.measure(nbytes).items():
            base[k][nbytes] = v
        plain = producer.make.remote(nbytes)
        kept = producer.make_kept.remote(nbytes)
        zmesh.wait([plain, kept], num_returns=2)
        times, _ = zmesh.get(consumer.pull.remote([plain], reps, producer))
        out["store"][nbytes] = statistics.median(times)
        times, out["tt_cpu"][nbytes] = zmesh.get(consumer.pull.remote([kept], reps, producer))
        out["tt"][nbytes], out["tt_best"][nbytes] = statistics.median(times), min(times)
        del plain, kept
        ar = zmesh.get([m.allreduce.remote(nbytes, reps) for m in members])
        out["ar"][nbytes] = statistics.median(ar[0][0] + ar[1][0])
        out["ar_cpu"][nbytes] = ar[0][1] + ar[1][1]
        out["ar_api"][nbytes] = ar[0][2][0] + ar[1][2][0]
        out["ar_pg"][nbytes] = ar[0][2][1] + ar[1][2][1]
    return base, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="sizes up to 16 MB, fewer reps")
    parser.add_argument("--big", action="store_true", help="add 256 MB and 1 GB")
    parser.add_argument("--rounds", type=int, default=1, help="repeat the whole table")
    parser.add_argument("--reps", type=int, default=0, help="transfers per cell (median)")
    parser.add_argument("--sizes", default="", help="sizes in MB, comma-separated (e.g. 1,16,256)")
    args = parser.parse_args()
    sizes = [s for s in SIZES if s <= (16 << 20)] if args.quick else SIZES
    if args.big:
        sizes += BIG
    if args.sizes:
        sizes = [int(float(mb) * (1 << 20)) for mb in args.sizes.split(",")]
    reps = args.reps or (5 if args.quick else 11)

    zmesh.init(num_cpus=4, object_store_memory=(3 << 30) if max(sizes) > (64 << 20) else (1 << 30))
    producer, consumer = Producer.remote(), Consumer.remote()
    members = [Member.remote(r) for r in range(2)]
    col.create_collective_group(members, 2, [0, 1], backend="gloo", group_name="bench")
    rounds: list[tuple[dict[str, dict[int, float]], dict[str, dict[int, float]]]] = []
    loads = []
    raw = Raw(reps)
    for _ in range(args.rounds):  # raw and zmesh alternate size by size: the same load
        loads.append(os.getloadavg()[0])
        rounds.append(one_round(sizes, reps, raw, producer, consumer, members))
    loads.append(os.getloadavg()[0])
    raw.stop()
    zmesh.shutdown()

    print(f"gloo on CPU, {os.cpu_count()} cores, {reps} transfers per cell (median), "
          f"{args.rounds} round(s): median [min-max] over rounds, in ms; load average "
          f"(1 min) {min(loads):.1f}-{max(loads):.1f}")
    print(f"{'size':>7} | {'object store':>20} | {'transport':>22} | {'raw p2p':>22} | "
          f"{'tt/raw':>6} | {'raw req/reply':>22} | {'tt/rr':>6} | {'allreduce':>22} | "
          f"{'raw allreduce':>22} | {'ar/raw':>6}")
    for nbytes in sizes:
        st = [z["store"][nbytes] for _, z in rounds]
        tt = [z["tt"][nbytes] for _, z in rounds]
        ar = [z["ar"][nbytes] for _, z in rounds]
        rp = [b["p2p"][nbytes] for b, _ in rounds]
        rr = [b["rr"][nbytes] for b, _ in rounds]
        ra = [b["allreduce"][nbytes] for b, _ in rounds]
        ratio_tt = statistics.median([t / r for t, r in zip(tt, rp)])
        ratio_ar = statistics.median([a / r for a, r in zip(ar, ra)])
        ratio_rr = statistics.median([t / r for t, r in zip(tt, rr)])
        print(f"{fmt_size(nbytes):>7} | {cell(st):>20} | {cell(tt):>22} | {cell(rp):>22} | "
              f"{ratio_tt:5.2f}x | {cell(rr):>22} | {ratio_rr:5.2f}x | {cell(ar):>22} | "
              f"{cell(ra):>22} | {ratio_ar:5.2f}x", flush=True)
    print("CPU ms per operation, both processes together (load moves it far less than wall "
          "time): transport (consumer + producer) vs raw req/reply (both peers); allreduce "
          "(both members) vs raw allreduce (both peers); median over rounds:")
    for nbytes in sizes:
        tc = statistics.median(z["tt_cpu"][nbytes] for _, z in rounds) * 1e3
        rc = statistics.median(b["rr_cpu"][nbytes] for b, _ in rounds) * 1e3
        ac = statistics.median(z["ar_cpu"][nbytes] for _, z in rounds) * 1e3
        bc = statistics.median(b["ar_cpu"][nbytes] for b, _ in rounds) * 1e3
        print(f"{fmt_size(nbytes):>7} | transport {tc:8.3f} | raw req/reply {rc:8.3f} | "
              f"{tc / rc:5.2f}x | allreduce {ac:8.3f} | raw allreduce {bc:8.3f} | "
              f"{ac / bc:5.2f}x")
    print("allreduce in the same two members on the same group, alternating call by call: "
          "zmesh.collective.allreduce vs torch's pg.allreduce().wait() (what the API adds), "
          "ms, median over rounds:")
    for nbytes in sizes:
        api = statistics.median(z["ar_api"][nbytes] for _, z in rounds) / 2 * 1e3
        tpg = statistics.median(z["ar_pg"][nbytes] for _, z in rounds) / 2 * 1e3
        print(f"{fmt_size(nbytes):>7} | zmesh.collective {api:9.3f} | torch pg {tpg:9.3f} | "
              f"{api / tpg:5.2f}x")
    print("best single transfer over every round (the least disturbed by the load), ms:")
    for nbytes in sizes:
        tt_best = min(z["tt_best"][nbytes] for _, z in rounds)
        raw_best = min(b["p2p_best"][nbytes] for b, _ in rounds)
        print(f"{fmt_size(nbytes):>7} | transport {tt_best * 1e3:9.3f} | raw p2p "
              f"{raw_best * 1e3:9.3f} | {tt_best / raw_best:5.2f}x")


if __name__ == "__main__":
    main()
