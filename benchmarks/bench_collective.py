"""allreduce (and broadcast) in a zmesh collective group vs raw torch.distributed between
two plain processes, gloo on CPU; and where the difference comes from.

Three columns, each two processes running the same tensor through the same collective:
- raw: two plain processes (spawned by this script) with a gloo group of their own, calling
  `pg.allreduce([t]).wait()` (`pg.broadcast([t], 0).wait()`): the target's denominator;
- api: two zmesh actors in a declared collective group, calling `zmesh.collective.allreduce`
  (`broadcast`): what a user gets;
- pg: the same two actors calling torch's `pg.allreduce([t]).wait()` on the group's own
  process group: api/pg is what the API's Python adds, pg/raw what living in an actor
  worker (its threads, its node beside it) adds.

Honest under load (this 2-core host is shared; wall time swings by tens of percent):
- interleaved: every (size, op) runs --blocks blocks; a block runs every column for --reps
  collectives (more below 16 MB: see reps_for), the columns' order rotating block by block; every block of every column
  starts with a barrier and one untimed warm-up collective, then times each collective;
- each process times its own collectives: both ranks' times are pooled (p10, p50);
- the verdict is the median over blocks of each block's p50 ratio (api p50 / raw p50 in
  the same block), printed with its lowest and highest block: a block's columns ran within
  a second of each other, so load that comes and goes moves both;
- CPU per collective of both processes (time.process_time, every thread), the median over
  blocks; with --threads, split by thread (the caller, gloo's threads, zmesh's own threads,
  others) with their wake-ups, from /proc/<pid>/task/*/schedstat; and the node's CPU;
- the load average at start and end of every size; nothing is discarded.
- --wrapper: the API's own cost per call without any data moving (torch's process group
  replaced by one whose works are already done), vs calling that stub directly.

    python benchmarks/bench_collective.py                   # 1, 4, 16, 64 MB
    python benchmarks/bench_collective.py --quick           # 1, 4 MB, fewer reps
    python benchmarks/bench_collective.py --sizes 1,64 --blocks 12 --reps 10 --threads
    python benchmarks/bench_collective.py --ops allreduce,broadcast --wrapper --json r1.json
    python benchmarks/bench_collective.py --summarize r1.json r2.json r3.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing as mp
import os
import queue
import resource
import statistics
import threading
import time
from typing import Any

import torch

import zmesh
import zmesh.collective as col

SIZES_MB = [1, 4, 16, 64]
COLUMNS: tuple[str, ...] = ("raw", "api", "pg")  # --aa adds "raw2", a second plain pair
GROUP = "bench"
KINDS = ("caller", "gloo", "main", "watchdog", "py", "native")
# One block of one column in one process: its collectives' times, its CPU seconds per
# collective, and per thread kind (CPU seconds, wake-ups) per collective.
Block = tuple[list[float], float, dict[str, tuple[float, float]]]


def threads_now() -> dict[int, tuple[str, int, int]]:
    """Every thread of this process: tid -> (kind, run ns, times it was put on a core)."""
    python = {t.native_id: t.name for t in threading.enumerate()}
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                comm = f.read().strip()
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                run_ns, _wait, slices = f.read().split()
        except OSError:  # the thread ended between listdir and open
            continue
        name = "MainThread" if int(tid) == os.getpid() else python.get(int(tid))
        out[int(tid)] = (kind_of(name, comm), int(run_ns), int(slices))
    return out


def kind_of(python_name: str | None, comm: str) -> str:
    """gloo's threads; the main thread (in a worker: zmesh's event loop); `collective-*`
    the group's watchdog; other Python threads (log pumps, ...); other native threads."""
    if comm.startswith(("gloo", "pt_gloo")):
        return "gloo"
    if python_name is None:
        return "native"
    if python_name == "MainThread":
        return "main"
    if python_name.startswith("collective-"):
        return "watchdog"
    return "py"


def by_kind(before: dict[int, tuple[str, int, int]], after: dict[int, tuple[str, int, int]],
            caller: int, n: int) -> dict[str, tuple[float, float]]:
    """CPU seconds and wake-ups per collective, by thread kind (threads born meanwhile count
    from zero)."""
    out: dict[str, list[float]] = {}
    for tid, (kind, run_ns, slices) in after.items():
        _, run0, slices0 = before.get(tid, (kind, 0, 0))
        acc = out.setdefault("caller" if tid == caller else kind, [0.0, 0.0])
        acc[0] += (run_ns - run0) / 1e9 / n
        acc[1] += (slices - slices0) / n
    return {k: (v[0], v[1]) for k, v in out.items()}


def pin(cpu: int) -> None:
    """Every thread of this process (and those it starts later) onto one CPU (-1: leave)."""
    if cpu >= 0:
        for tid in os.listdir("/proc/self/task"):
            os.sched_setaffinity(int(tid), {cpu})


def timed(call: Any, barrier: Any, reps: int) -> Block:
    """Warm up, meet the peer, then time `reps` calls of `call` here."""
    call()
    barrier()
    times = []
    caller = threading.get_native_id()
    before, cpu0 = threads_now(), time.process_time()
    faults0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(reps):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    cpu1, after = time.process_time(), threads_now()
    kinds = by_kind(before, after, caller, reps)
    # page faults per collective (as a kind, the CPU slot 0): a scratch buffer that malloc
    # maps afresh for every collective costs a fault per 4 KB page, and shows here
    kinds["faults"] = (0.0, (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults0) / reps)
    return times, (cpu1 - cpu0) / reps, kinds


def torch_call(pg: Any, op: str, t: Any) -> Any:
    """torch's own call, as a plain torch.distributed program makes it."""
    import torch.distributed as dist

    if op == "allreduce":
        return lambda: pg.allreduce([t]).wait()
    opts = dist.BroadcastOptions()
    opts.rootRank = 0
    return lambda: pg.broadcast([t], opts).wait()


@zmesh.remote
class Member:
    def run(self, column: str, op: str, nbytes: int, reps: int, cpu: int) -> Block:
        from zmesh.collective.api import _group

        pin(cpu)
        t = torch.ones(nbytes // 4)
        g = _group(GROUP)  # joins the declared group on first use
        if column == "api":
            call = (lambda: col.allreduce(t, GROUP)) if op == "allreduce" else \
                (lambda: col.broadcast(t, 0, GROUP))
        else:
            call = torch_call(g.pg, op, t)
        return timed(call, lambda: col.barrier(GROUP), reps)

    def wrapper_us(self, calls: int) -> tuple[float, float]:
        """Microseconds per call of col.allreduce and of the stub it calls, best of 5
        rounds, with torch's process group swapped for one whose works are done at once."""
        from zmesh.collective.api import _group

        g = _group(GROUP)
        t, stub, real = torch.ones(4), _StubGroup(), g.pg
        best = [float("inf"), float("inf")]
        g.pg = stub
        try:
            for _ in range(5):
                for i, call in enumerate((lambda: col.allreduce(t, GROUP),
                                          lambda: stub.allreduce([t]).wait())):
                    start = time.perf_counter()
                    for _ in range(calls):
                        call()
                    best[i] = min(best[i], (time.perf_counter() - start) / calls * 1e6)
        finally:
            g.pg = real
        return best[0], best[1]


class _Done:
    def wait(self, timeout: Any = None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True


class _StubGroup:
    done = _Done()

    def allreduce(self, tensors: Any, opts: Any = None) -> _Done:
        return self.done


def _raw_peer(rank: int, port: int, todo: Any, out: Any) -> None:
    """One of the two plain processes: runs each (op, size, reps) it is told (None: stop)."""
    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", port, 2, rank == 0, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=300))
    pg = dist.ProcessGroupGloo(store, rank, 2, datetime.timedelta(seconds=300))
    while (job := todo.get()) is not None:
        op, nbytes, reps, cpu = job
        pin(cpu)
        t = torch.ones(nbytes // 4)
        out.put((rank, timed(torch_call(pg, op, t), lambda: pg.barrier().wait(), reps)))


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
        self.procs = [ctx.Process(target=_raw_peer, args=(r, port, self.todo[r], self.out),
                                  daemon=True) for r in range(2)]
        for p in self.procs:
            p.start()

    def run(self, op: str, nbytes: int, reps: int, pinned: bool) -> list[Block]:
        for rank, q in enumerate(self.todo):
            q.put((op, nbytes, reps, rank if pinned else -1))
        got: dict[int, Block] = {}
        deadline = time.monotonic() + 1200
        while len(got) < 2:
            try:
                rank, block = self.out.get(timeout=1.0)
                got[rank] = block
            except queue.Empty:
                dead = [p.exitcode for p in self.procs if not p.is_alive()]
                if dead or time.monotonic() > deadline:
                    raise RuntimeError(f"a raw peer died (exit codes {dead}) or timed out") from None
        return [got[0], got[1]]

    def stop(self) -> None:
        for q in self.todo:
            q.put(None)
        for p in self.procs:
            p.join(timeout=60)
            if p.is_alive():
                p.terminate()


def node_pids() -> list[int]:
    """This driver's zmesh node process(es), found by parent pid and command line."""
    me, found = os.getpid(), []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == me and b"zmesh.runtime.node" in cmd:
            found.append(int(pid))
    return found


def proc_cpu_s(pids: list[int]) -> float:
    """Run time of every thread of `pids`, seconds."""
    total = 0
    for pid in pids:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    total += int(f.read().split()[0])
            except OSError:
                continue
    return total / 1e9


class Sample:
    """Every block of one (size, op): both processes' Blocks per column, and node CPU."""

    def __init__(self) -> None:
        self.blocks: dict[str, list[list[Block]]] = {c: [] for c in COLUMNS}
        self.node_cpu: dict[str, list[float]] = {c: [] for c in COLUMNS}
        self.driver_cpu: dict[str, list[float]] = {c: [] for c in COLUMNS}

    def times(self, column: str) -> list[float]:
        return [t for both in self.blocks[column] for b in both for t in b[0]]

    def p(self, column: str, q: float) -> float:
        return pct(self.times(column), q) * 1e3

    def block_p50(self, column: str) -> list[float]:
        return [statistics.median([t for b in both for t in b[0]])
                for both in self.blocks[column]]

    def ratios(self, num: str, den: str) -> list[float]:
        return [a / b for a, b in zip(self.block_p50(num), self.block_p50(den))]

    def cpu_ms(self, column: str) -> float:
        return statistics.median(sum(b[1] for b in both) for both in self.blocks[column]) * 1e3

    def record(self) -> dict[str, Any]:
        """What --summarize needs: every block's p50 and CPU per column, pooled p10/p50."""
        return {c: {"block_p50_ms": [x * 1e3 for x in self.block_p50(c)],
                    "p10_ms": self.p(c, .1), "p50_ms": self.p(c, .5),
                    "cpu_ms": [sum(b[1] for b in both) * 1e3 for both in self.blocks[c]]}
                for c in COLUMNS}

    def kinds_ms(self, column: str) -> dict[str, tuple[float, float]]:
        """Median over blocks of each thread kind's CPU ms and wake-ups per collective,
        both processes summed."""
        per_block: dict[str, list[tuple[float, float]]] = {}
        for both in self.blocks[column]:
            summed: dict[str, list[float]] = {}
            for b in both:
                for kind, (cpu, wakes) in b[2].items():
                    acc = summed.setdefault(kind, [0.0, 0.0])
                    acc[0] += cpu
                    acc[1] += wakes
            for kind, (cpu, wakes) in summed.items():
                per_block.setdefault(kind, []).append((cpu, wakes))
        return {k: (statistics.median(c for c, _ in v) * 1e3, statistics.median(w for _, w in v))
                for k, v in per_block.items()}


def pct(values: list[float], q: float) -> float:
    """The q-quantile (0..1) of `values`, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def measure(op: str, nbytes: int, blocks: int, reps: int, raw: dict[str, Raw], members: list[Any],
            node: list[int], pinned: bool) -> Sample:
    """`blocks` blocks of every column, interleaved, the order rotating."""
    s = Sample()
    for block in range(blocks):
        k = block % len(COLUMNS)
        for column in COLUMNS[k:] + COLUMNS[:k]:
            n0, d0 = proc_cpu_s(node), proc_cpu_s([os.getpid()])
            if column in raw:
                both = raw[column].run(op, nbytes, reps, pinned)
            else:
                both = zmesh.get([m.run.remote(column, op, nbytes, reps, r if pinned else -1)
                                  for r, m in enumerate(members)])
            s.node_cpu[column].append((proc_cpu_s(node) - n0) / reps)
            s.driver_cpu[column].append((proc_cpu_s([os.getpid()]) - d0) / reps)
            s.blocks[column].append(both)
    return s


def fmt_size(n: int) -> str:
    return f"{n >> 20} MB" if n >= 1 << 20 else f"{n >> 10} KB"


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):5.2f}x [{min(values):4.2f}-{max(values):4.2f}]"


def report(op: str, nbytes: int, s: Sample, load: tuple[float, float]) -> None:
    print(f"{op:>9} {fmt_size(nbytes):>6} | {s.p('raw', .1):7.2f} {s.p('raw', .5):7.2f} | "
          f"{s.p('api', .1):7.2f} {s.p('api', .5):7.2f} | {s.p('pg', .1):7.2f} "
          f"{s.p('pg', .5):7.2f} | {spread(s.ratios('api', 'raw'))} "
          f"{spread(s.ratios('pg', 'raw'))} {spread(s.ratios('api', 'pg'))} | "
          f"{s.p('api', .1) / s.p('raw', .1):5.2f}x | "
          f"{s.cpu_ms('raw'):7.2f} {s.cpu_ms('api'):7.2f} {s.cpu_ms('pg'):7.2f} "
          f"{s.cpu_ms('api') / s.cpu_ms('raw'):5.2f}x | {load[0]:.1f}-{load[1]:.1f}",
          flush=True)
    if "raw2" in s.blocks:
        print(f"{'':>9} {'A/A':>6} | raw2 p10/p50 {s.p('raw2', .1):7.2f} {s.p('raw2', .5):7.2f} "
              f"| raw2/raw {spread(s.ratios('raw2', 'raw'))} | CPU raw2 "
              f"{s.cpu_ms('raw2'):7.2f} {s.cpu_ms('raw2') / s.cpu_ms('raw'):5.2f}x", flush=True)


def report_threads(op: str, nbytes: int, s: Sample) -> None:
    for column in COLUMNS:
        kinds = s.kinds_ms(column)
        parts = " ".join(f"{k} {kinds[k][0]:6.3f} ms/{kinds[k][1]:5.2f}"
                         for k in KINDS if k in kinds)
        parts += f" page faults {kinds.get('faults', (0.0, 0.0))[1]:7.1f}"
        node = statistics.median(s.node_cpu[column]) * 1e3
        driver = statistics.median(s.driver_cpu[column]) * 1e3
        print(f"{op:>9} {fmt_size(nbytes):>6} {column:>4} | {parts} | node {node:6.3f} ms, "
              f"this driver {driver:6.3f} ms", flush=True)


def summarize(paths: list[str]) -> None:
    """Several runs' --json files together: per (op, size), every block of every run."""
    runs = []
    for path in paths:
        with open(path) as f:
            runs.append(json.load(f))
    keys = list(dict.fromkeys((r["op"], r["bytes"]) for run in runs for r in run))
    print(f"{len(runs)} runs ({', '.join(paths)}); ratios: median of the block p50 ratios "
          f"of all runs [quartiles] (blocks); per run: that run's median; p10: median over "
          f"runs of pooled p10 ratios; CPU: median over all blocks")
    print(f"{'op':>9} {'size':>6} | {'api/raw all blocks':>24} | {'per run':>20} | "
          f"{'pg/raw':>17} | {'api/pg':>17} | p10 a/r | CPU a/r | load")
    for op, nbytes in keys:
        recs = [r for run in runs for r in run if (r["op"], r["bytes"]) == (op, nbytes)]

        def ratios(num: str, den: str, rs: list[dict[str, Any]] = recs) -> list[float]:
            return [a / b for r in rs for a, b in zip(r[num]["block_p50_ms"],
                                                    r[den]["block_p50_ms"])]

        def quart(v: list[float]) -> str:
            q = statistics.quantiles(v, n=4) if len(v) > 1 else v * 3
            return f"{statistics.median(v):5.2f}x [{q[0]:4.2f}-{q[2]:4.2f}]"

        api_raw = ratios("api", "raw")
        per_run = " ".join(f"{statistics.median(ratios('api', 'raw', [r])):4.2f}" for r in recs)
        p10 = statistics.median(r["api"]["p10_ms"] / r["raw"]["p10_ms"] for r in recs)
        cpu = statistics.median(c for r in recs for c in r["api"]["cpu_ms"]) / \
            statistics.median(c for r in recs for c in r["raw"]["cpu_ms"])
        loads = [x for r in recs for x in r["load"]]
        print(f"{op:>9} {fmt_size(nbytes):>6} | {quart(api_raw)} ({len(api_raw):3d}) | "
              f"{per_run:>20} | {quart(ratios('pg', 'raw'))} | {quart(ratios('api', 'pg'))} | "
              f"{p10:6.2f}x | {cpu:6.2f}x | {min(loads):.1f}-{max(loads):.1f}")
        if all("raw2" in r for r in recs):  # --aa runs: two identical plain pairs
            aa = ratios("raw2", "raw")
            aa_runs = " ".join(f"{statistics.median(ratios('raw2', 'raw', [r])):4.2f}"
                               for r in recs)
            print(f"{'':>9} {'A/A':>6} | {quart(aa)} ({len(aa):3d}) | {aa_runs:>20} | "
                  f"raw2/raw: a second pair of plain processes vs the first")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 and 4 MB, fewer blocks")
    parser.add_argument("--sizes", default="", help="sizes in MB, comma-separated")
    parser.add_argument("--ops", default="allreduce", help="allreduce,broadcast")
    parser.add_argument("--blocks", type=int, default=0, help="interleaved blocks per size")
    parser.add_argument("--reps", type=int, default=0, help="collectives per block and column")
    parser.add_argument("--threads", action="store_true", help="CPU by thread kind, node CPU")
    parser.add_argument("--wrapper", action="store_true", help="the API's cost per call alone")
    parser.add_argument("--pin", action="store_true",
                        help="rank r's process (raw and zmesh alike) on CPU r, every thread")
    parser.add_argument("--aa", action="store_true",
                        help="a second pair of plain processes as a 4th column (raw2): an A/A "
                             "check of how far two identical pairs differ")
    parser.add_argument("--json", default="", help="write every block's figures to this file")
    parser.add_argument("--summarize", nargs="+", metavar="JSON",
                        help="print several runs' --json files together, run nothing")
    args = parser.parse_args()
    if args.summarize:
        summarize(args.summarize)
        return
    sizes_mb = [float(x) for x in args.sizes.split(",")] if args.sizes else \
        (SIZES_MB[:2] if args.quick else SIZES_MB)
    ops = args.ops.split(",")
    if not set(ops) <= {"allreduce", "broadcast"}:
        parser.error(f"--ops takes allreduce and/or broadcast, got {args.ops!r}")
    blocks = args.blocks or (4 if args.quick else 8)
    reps = args.reps or (6 if args.quick else 10)

    zmesh.init(num_cpus=4)
    members = [Member.remote() for _ in range(2)]
    col.create_collective_group(members, 2, [0, 1], backend="gloo", group_name=GROUP)
    global COLUMNS
    if args.aa:
        COLUMNS = (*COLUMNS, "raw2")
    raw = {c: Raw() for c in COLUMNS if c.startswith("raw")}
    try:
        run_all([int(mb * (1 << 20)) for mb in sizes_mb], ops, blocks, reps, raw, members,
                args.threads, args.wrapper, args.json, args.pin)
    finally:
        for r in raw.values():
            r.stop()
        zmesh.shutdown()


def reps_for(nbytes: int, reps: int) -> int:
    """`reps` at 16 MB and up; more below (up to 10x), so that a block's p50 rests on as
    many milliseconds of collectives as at 16 MB, not on a handful of sub-ms samples."""
    return max(reps, min(10 * reps, reps * (16 << 20) // max(nbytes, 1)))


def run_all(sizes: list[int], ops: list[str], blocks: int, reps: int, raw: dict[str, Raw],
            members: list[Any], threads: bool, wrapper: bool, json_path: str,
            pinned: bool) -> None:
    node = node_pids()
    print(f"gloo on CPU, {os.cpu_count()} cores; per size {blocks} interleaved blocks x "
          f"{', '.join(f'{reps_for(n, reps)} ({fmt_size(n)})' for n in sizes)} collectives "
          f"per column, both ranks timed and pooled for p10/p50; "
          f"{time.strftime('%H:%M:%S')} UTC, load average {os.getloadavg()[0]:.1f}")
    print("ms per collective. ratios: median over blocks of the block's p50 ratio "
          "[lowest-highest block]; p10 a/r: pooled p10 of api / of raw. CPU: ms per "
          "collective, both processes, median over blocks")
    print(f"{'op':>9} {'size':>6} | {'raw p10/p50':>15} | {'api p10/p50':>15} | "
          f"{'pg p10/p50':>15} | {'api/raw':>18} {'pg/raw':>18} {'api/pg':>18} | "
          f"{'p10 a/r':>6} | "
          f"{'CPU raw':>7} {'api':>7} {'pg':>7} api/raw | load")
    samples: list[tuple[str, int, Sample]] = []
    records: list[dict[str, Any]] = []
    for nbytes in sizes:
        for op in ops:
            load0 = os.getloadavg()[0]
            s = measure(op, nbytes, blocks, reps_for(nbytes, reps), raw, members, node, pinned)
            samples.append((op, nbytes, s))
            load1 = os.getloadavg()[0]
            report(op, nbytes, s, (load0, load1))
            records.append({"op": op, "bytes": nbytes, "load": [load0, load1],
                            "at": time.strftime("%H:%M:%S"), **s.record()})
            if json_path:  # after every size: a run cut short keeps what it measured
                with open(json_path, "w") as f:
                    json.dump(records, f, indent=1)
    if threads:
        print("by thread: CPU ms / wake-ups per collective, both processes (median over "
              "blocks); minor page faults per collective, both processes; node: the zmesh node's CPU ms per collective during the block")
        for op, nbytes, s in samples:
            report_threads(op, nbytes, s)
    if wrapper:
        both = zmesh.get([m.wrapper_us.remote(20_000) for m in members])
        api, stub = min(b[0] for b in both), min(b[1] for b in both)
        print(f"API alone (torch's group stubbed, best of 5 x 20,000 calls): "
              f"col.allreduce {api:.2f} us/call, the stub called directly {stub:.2f} us/call, "
              f"the API adds {api - stub:.2f} us/call")
    print(f"load average at end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
