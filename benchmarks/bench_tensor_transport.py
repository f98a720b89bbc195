"""Moving a tensor actor -> actor: the object store vs the tensor transport vs raw
torch.distributed send/recv between two plain processes; and allreduce in a zmesh
collective group vs raw torch.distributed. gloo on CPU here (nccl when a GPU is there).

Each cell moves one float32 tensor of the given size, timed in the receiver: `zmesh.get(ref)`
inside the consuming actor (object store: the same node maps the producer's object,
zero-copy; transport: a request to the producer, then gloo send/recv), and for raw one
send/recv between two plain processes. "raw req/reply" is the floor of any pull, in plain
processes: a small request, then a status and the tensor back (the transport's hops without
zmesh). Allreduce is timed inside the members. Both raw receivers reuse one warm buffer; the
transport receives into pooled warm blocks.

Honest under load (a shared machine swings wall time by tens of percent):
- interleaved: every size is measured in --blocks blocks; each block runs every column
  (raw p2p, raw req/reply, transport, object store; raw and zmesh allreduce) for --reps
  transfers, the columns' order rotating block by block, so each column sees the same load;
- p10 and p50 of every transfer of a column (blocks pooled), and CPU per transfer of both
  processes together (user + system seconds, from os.times: the load moves it far less than
  wall time; a copy would show in it), the median over blocks;
- the machine's load average before and after, printed with the table.
Like with like: the same tensor, no rendezvous and no actor call inside a timed span (the
transport's includes reading the descriptor from the store: that is part of its cost). Raw
p2p is a push between two processes that a barrier has just woken: the floor of a one-way
move, not of a pull; the transport is a pull (the producer does not know who will read the
ref, so the consumer asks and the producer's thread must wake to answer), whose floor is raw
req/reply. Both are printed. Raw p2p's CPU includes its barrier per transfer.

At dispatch (the weight-sync pattern, `consumer.load.remote(ref)`): "call" times the driver's
dispatch of `consumer.stamp.remote(plain_ref)` (a small put object) to the start of the
method in the consumer; "push" the same call with a new transport ref, to the start of the
method, i.e. once the tensor was received while the call's arguments were read (pushed by
the producer at dispatch where the runtime does so, else pulled then). Their difference is
what the tensor adds to the call, set against raw p2p. One clock (perf_counter,
CLOCK_MONOTONIC) in the driver and the consumer. CPU there: the consumer's and the
producer's per call (the driver's not counted).

    python benchmarks/bench_tensor_transport.py            # 4 KB ... 64 MB
    python benchmarks/bench_tensor_transport.py --big      # ... and 256 MB, 1 GB (slow)
    python benchmarks/bench_tensor_transport.py --quick    # 4 KB ... 16 MB, fewer transfers
    python benchmarks/bench_tensor_transport.py --sizes 1,4,64,256 --blocks 8 --reps 5
"""

from __future__ import annotations

import argparse
import datetime
import multiprocessing as mp
import os
import statistics
import time
from typing import Any

import torch

import zmesh
import zmesh.collective as col

SIZES = [4 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]
BIG = [256 << 20, 1 << 30]
COLUMNS = ("p2p", "rr", "tt", "store", "call", "push")  # rotated block by block
Result = tuple[list[float], float]  # times of each transfer, CPU s per transfer (both sides)


def _cpu() -> float:
    """This process's CPU seconds so far, user + system (system: the socket copies), at
    nanosecond resolution (os.times counts 10 ms ticks)."""
    return time.process_time()


@zmesh.remote
class Producer:
    def make(self, nbytes: int):
        return torch.ones(nbytes // 4, dtype=torch.float32)

    @zmesh.method(tensor_transport="gloo")
    def make_kept(self, nbytes: int):
        return torch.ones(nbytes // 4, dtype=torch.float32)

    def cpu(self) -> float:
        return _cpu()


@zmesh.remote
class Consumer:
    def __init__(self) -> None:
        self.call_cpu = -1.0

    def pull(self, refs: list, reps: int, producer) -> Result:
        """Times of fetching the (nested, so unresolved) ref here, and the CPU seconds per
        transfer of both processes (this one's, and the producer's less what asking it for
        its CPU time costs it)."""
        if self.call_cpu < 0:
            probe = [zmesh.get(producer.cpu.remote()) for _ in range(4)]
            self.call_cpu = min(b - a for a, b in zip(probe, probe[1:]))
        zmesh.get(refs[0])  # the first read of a block: its pair and pool block are warm
        times = []
        cpu0, prod0 = _cpu(), zmesh.get(producer.cpu.remote())
        for _ in range(reps):
            start = time.perf_counter()
            value = zmesh.get(refs[0])
            times.append(time.perf_counter() - start)
            del value
        prod1, cpu1 = zmesh.get(producer.cpu.remote()), _cpu()
        return times, (cpu1 - cpu0 + max(0.0, prod1 - prod0 - self.call_cpu)) / reps

    def stamp(self, value: Any) -> float:
        """When the call's argument is usable here (its tensor received, if it has one)."""
        return time.perf_counter()

    def cpu(self) -> float:
        return _cpu()


def dispatch(consumer: Any, producer: Any, make: Any, reps: int) -> Result:
    """Times from the driver's dispatch of `consumer.stamp.remote(ref)` to the argument
    being usable in the consumer (perf_counter is CLOCK_MONOTONIC: one clock for every
    process here), a new ref each time (`make()`, made and ready before the clock starts:
    as in a weight sync, no read finds the tensors of an earlier call's ref), and the CPU
    seconds per call of the consumer and the producer (both include the stamp calls' own
    cost, not the making of the refs; the driver's is not counted)."""
    refs = [make() for _ in range(reps)]
    zmesh.wait(refs, num_returns=reps)
    cpu0 = zmesh.get([consumer.cpu.remote(), producer.cpu.remote()])
    times = []
    for ref in refs:
        start = time.perf_counter()
        times.append(zmesh.get(consumer.stamp.remote(ref)) - start)
    cpu1 = zmesh.get([consumer.cpu.remote(), producer.cpu.remote()])
    return times, (sum(cpu1) - sum(cpu0)) / reps


@zmesh.remote
class Member:
    def allreduce(self, nbytes: int, reps: int) -> Result:
        t = torch.ones(nbytes // 4)
        col.allreduce(t, "bench")  # warm up (and join the declared group)
        times = []
        cpu0 = _cpu()
        for _ in range(reps):
            start = time.perf_counter()
            col.allreduce(t, "bench")
            times.append(time.perf_counter() - start)
        return times, (_cpu() - cpu0) / reps

    def api_vs_pg(self, nbytes: int, reps: int) -> tuple[float, float]:
        """zmesh.collective.allreduce vs torch's pg.allreduce().wait() on the same group in
        the same processes, call by call alternating (what the API adds, placement aside)."""
        from zmesh.collective.api import _group

        t = torch.ones(nbytes // 4)
        pg, api, raw = _group("bench").pg, [], []
        for _ in range(reps):
            start = time.perf_counter()
            col.allreduce(t, "bench")
            api.append(time.perf_counter() - start)
            start = time.perf_counter()
            pg.allreduce([t]).wait()
            raw.append(time.perf_counter() - start)
        return statistics.median(api), statistics.median(raw)


def _raw_peer(rank: int, port: int, todo: Any, out: Any) -> None:
    """One of two plain processes with a gloo group; runs each (what, size, reps) it is told
    (None: stop) and answers (times at this rank, CPU seconds per transfer here)."""
    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", port, 2, rank == 0, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=300))
    pg = dist.ProcessGroupGloo(store, rank, 2, datetime.timedelta(seconds=300))
    t = torch.ones(0)
    request = torch.zeros(168, dtype=torch.uint8)
    status = torch.zeros(1, dtype=torch.int64)
    while (job := todo.get()) is not None:
        what, nbytes, reps = job
        if t.nbytes != nbytes:
            t = torch.ones(nbytes // 4)
        pg.barrier().wait()
        times = []
        cpu0 = _cpu()
        for _ in range(reps):
            if what == "p2p":  # a push: both woken by a barrier, then one send/recv
                pg.barrier().wait()
                start = time.perf_counter()
                work = pg.send([t], 1, 0) if rank == 0 else pg.recv([t], 0, 0)
                work.wait()
            elif what == "rr":  # a pull: rank 1 posts its receives and asks, rank 0 answers
                start = time.perf_counter()
                if rank == 0:
                    pg.recv([request], 1, 0).wait()
                    works = [pg.send([status], 1, 1), pg.send([t], 1, 2)]
                else:
                    works = [pg.recv([status], 0, 1), pg.recv([t], 0, 2),
                             pg.send([request], 0, 0)]
                for work in reversed(works):
                    work.wait()
            else:  # allreduce
                start = time.perf_counter()
                pg.allreduce([t]).wait()
            times.append(time.perf_counter() - start)
        out.put((rank, times, (_cpu() - cpu0) / reps))


class Raw:
    """The two plain processes, kept for the whole run."""

    def __init__(self) -> None:
        import torch.distributed as dist

        probe = dist.TCPStore("127.0.0.1", 0, 1, True, wait_for_workers=False)  # type: ignore[attr-defined]
        port = probe.port
        del probe
        ctx = mp.get_context("spawn")
        self.out: Any = ctx.Queue()
        self.todo = [ctx.Queue() for _ in range(2)]
        self.procs = [ctx.Process(target=_raw_peer, args=(r, port, self.todo[r], self.out))
                      for r in range(2)]
        for p in self.procs:
            p.daemon = True  # never outlive a benchmark that failed
            p.start()

    def run(self, what: str, nbytes: int, reps: int) -> Result:
        """Rank 1's times (the receiver's), CPU per transfer of both ranks."""
        for q in self.todo:
            q.put((what, nbytes, reps))
        got = {rank: (times, cpu) for rank, times, cpu in
               (self.out.get(timeout=1200) for _ in range(2))}
        return got[1][0], got[0][1] + got[1][1]

    def stop(self) -> None:
        for q in self.todo:
            q.put(None)
        for p in self.procs:
            p.join(timeout=60)
            if p.is_alive():
                p.terminate()


def fmt_size(n: int) -> str:
    return f"{n >> 30} GB" if n >= 1 << 30 else f"{n >> 20} MB" if n >= 1 << 20 else \
        f"{n >> 10} KB"


def pct(values: list[float], q: float) -> float:
    """The q-quantile (0..1) of `values`, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


class Cells:
    """Every transfer's time and every block's CPU per transfer, by column."""

    def __init__(self) -> None:
        self.times: dict[str, list[float]] = {}
        self.cpu: dict[str, list[float]] = {}

    def add(self, column: str, result: Result) -> None:
        self.times.setdefault(column, []).extend(result[0])
        self.cpu.setdefault(column, []).append(result[1])

    def p(self, column: str, q: float) -> float:
        return pct(self.times[column], q) * 1e3

    def cpu_ms(self, column: str) -> float:
        return statistics.median(self.cpu[column]) * 1e3


def measure(nbytes: int, blocks: int, reps: int, raw: Raw, producer: Any, consumer: Any,
            members: list[Any]) -> Cells:
    """One size: `blocks` blocks of every column, interleaved, the order rotating."""
    cells = Cells()
    refs = {"store": producer.make.remote(nbytes), "tt": producer.make_kept.remote(nbytes)}
    zmesh.wait(list(refs.values()), num_returns=2)
    plain, kept = (lambda: zmesh.put(0)), (lambda: producer.make_kept.remote(nbytes))
    dispatch(consumer, producer, kept, 2)  # the pair (made by a first read) is warm
    run = {
        "p2p": lambda: raw.run("p2p", nbytes, reps),
        "rr": lambda: raw.run("rr", nbytes, reps),
        "tt": lambda: zmesh.get(consumer.pull.remote([refs["tt"]], reps, producer)),
        "store": lambda: zmesh.get(consumer.pull.remote([refs["store"]], reps, producer)),
        "call": lambda: dispatch(consumer, producer, plain, reps),
        "push": lambda: dispatch(consumer, producer, kept, reps),
    }
    for block in range(blocks):
        order = COLUMNS[block % len(COLUMNS):] + COLUMNS[:block % len(COLUMNS)]
        for column in order:
            cells.add(column, run[column]())
        ar_order = ("raw_ar", "ar") if block % 2 == 0 else ("ar", "raw_ar")
        for column in ar_order:
            if column == "raw_ar":
                cells.add(column, raw.run("allreduce", nbytes, reps))
            else:
                both = zmesh.get([m.allreduce.remote(nbytes, reps) for m in members])
                cells.add(column, (both[0][0] + both[1][0], both[0][1] + both[1][1]))
    refs.clear()  # the tensors are freed before the next size
    both = zmesh.get([m.api_vs_pg.remote(nbytes, reps * 2) for m in members])
    cells.times["api"] = [(both[0][0] + both[1][0]) / 2]
    cells.times["pg"] = [(both[0][1] + both[1][1]) / 2]
    return cells


def report(nbytes: int, c: Cells, load: float) -> None:
    size = fmt_size(nbytes)
    print(f"{size:>7} | {c.p('store', .1):6.2f} {c.p('store', .5):6.2f} | "
          f"{c.p('tt', .1):7.2f} {c.p('tt', .5):7.2f} | {c.p('p2p', .1):7.2f} "
          f"{c.p('p2p', .5):7.2f} | {c.p('rr', .1):7.2f} {c.p('rr', .5):7.2f} | "
          f"{c.p('tt', .5) / c.p('p2p', .5):5.2f}x {c.p('tt', .5) / c.p('rr', .5):5.2f}x | "
          f"{c.cpu_ms('tt'):8.3f} {c.cpu_ms('rr'):8.3f} {c.cpu_ms('p2p'):8.3f} "
          f"{c.cpu_ms('tt') / c.cpu_ms('rr'):5.2f}x | {load:5.1f}", flush=True)


def report_dispatch(nbytes: int, c: Cells) -> None:
    """The transport read at dispatch: the ref as a call's top-level argument (pushed to the
    consumer when the runtime does that, pulled while the call's arguments are read when
    not), beside the same call with a plain ref, and raw p2p."""
    d10 = c.p("push", .1) - c.p("call", .1)
    d50 = c.p("push", .5) - c.p("call", .5)
    print(f"{fmt_size(nbytes):>7} | {c.p('call', .1):6.2f} {c.p('call', .5):6.2f} | "
          f"{c.p('push', .1):6.2f} {c.p('push', .5):6.2f} | {d10:6.2f} {d50:6.2f} | "
          f"{c.p('p2p', .1):6.2f} {c.p('p2p', .5):6.2f} | "
          f"{d10 / c.p('p2p', .1):5.2f}x {d50 / c.p('p2p', .5):5.2f}x | "
          f"{c.p('push', .5) / c.p('p2p', .5):5.2f}x | {c.cpu_ms('call'):7.3f} "
          f"{c.cpu_ms('push'):7.3f} {c.cpu_ms('push') - c.cpu_ms('call'):7.3f} "
          f"{c.cpu_ms('p2p'):7.3f}", flush=True)


def report_allreduce(nbytes: int, c: Cells) -> None:
    print(f"{fmt_size(nbytes):>7} | {c.p('ar', .1):8.2f} {c.p('ar', .5):8.2f} | "
          f"{c.p('raw_ar', .1):8.2f} {c.p('raw_ar', .5):8.2f} | "
          f"{c.p('ar', .5) / c.p('raw_ar', .5):5.2f}x | {c.cpu_ms('ar'):8.3f} "
          f"{c.cpu_ms('raw_ar'):8.3f} {c.cpu_ms('ar') / c.cpu_ms('raw_ar'):5.2f}x | "
          f"{c.p('api', .5):8.3f} {c.p('pg', .5):8.3f} {c.p('api', .5) / c.p('pg', .5):5.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="sizes up to 16 MB, fewer reps")
    parser.add_argument("--big", action="store_true", help="add 256 MB and 1 GB")
    parser.add_argument("--blocks", type=int, default=0, help="interleaved blocks per size")
    parser.add_argument("--reps", type=int, default=0, help="transfers per column and block")
    parser.add_argument("--sizes", default="", help="sizes in MB, comma-separated (e.g. 1,16,256)")
    args = parser.parse_args()
    sizes = [s for s in SIZES if s <= (16 << 20)] if args.quick else list(SIZES)
    if args.big:
        sizes += BIG
    if args.sizes:
        sizes = [int(float(mb) * (1 << 20)) for mb in args.sizes.split(",")]
    blocks = args.blocks or (3 if args.quick else 6)
    reps = args.reps or (4 if args.quick else 8)

    zmesh.init(num_cpus=4, object_store_memory=(3 << 30) if max(sizes) > (64 << 20) else (1 << 30))
    producer, consumer = Producer.remote(), Consumer.remote()
    members = [Member.remote() for _ in range(2)]
    col.create_collective_group(members, 2, [0, 1], backend="gloo", group_name="bench")
    raw = Raw()
    try:
        run_all(sizes, blocks, reps, raw, producer, consumer, members)
    finally:
        raw.stop()
        zmesh.shutdown()


def run_all(sizes: list[int], blocks: int, reps: int, raw: Raw, producer: Any, consumer: Any,
            members: list[Any]) -> None:
    load0 = os.getloadavg()[0]
    print(f"gloo on CPU, {os.cpu_count()} cores; per size {blocks} interleaved blocks x {reps} "
          f"transfers per column (p10/p50 over all {blocks * reps}); CPU = ms per transfer, "
          f"both processes, user+sys, median over blocks; {time.strftime('%H:%M:%S')} UTC, "
          f"load average (1 min) at start {load0:.1f}")
    print(f"{'size':>7} | {'store p10/p50':>13} | {'transport p10/p50':>15} | "
          f"{'raw p2p p10/p50':>15} | {'raw req/reply':>15} | {'tt/p2p':>6} {'tt/rr':>6} | "
          f"{'CPU tt':>8} {'CPU rr':>8} {'CPU p2p':>8} {'tt/rr':>6} | load")
    measured = []
    for nbytes in sizes:
        cells = measure(nbytes, blocks, reps, raw, producer, consumer, members)
        measured.append((nbytes, cells))
        report(nbytes, cells, os.getloadavg()[0])
    print("at dispatch (ms): call with a plain ref p10/p50 | the same call with the transport's "
          "ref p10/p50 | their difference p10/p50 | raw p2p p10/p50 | difference/p2p p10, p50 "
          "| call with the ref/p2p p50 | CPU ms per call (consumer + producer): plain, with "
          "the ref, difference; raw p2p")
    for nbytes, cells in measured:
        report_dispatch(nbytes, cells)
    print("allreduce (ms): zmesh group p10/p50 | raw torch.distributed p10/p50 | p50 ratio | "
          "CPU both members: zmesh, raw, ratio | same two members, call by call: "
          "zmesh.collective vs torch pg.allreduce().wait(), p50")
    for nbytes, cells in measured:
        report_allreduce(nbytes, cells)
    print(f"load average (1 min) at end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
