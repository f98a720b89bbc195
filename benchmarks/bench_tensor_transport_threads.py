"""Where a tensor transport pull spends its CPU, thread by thread, and whether gloo's loop
threads spin.

One producer actor keeps a tensor; one consumer actor reads its (nested) ref `--transfers`
times in a row. `perf stat --per-thread` watches both processes for exactly that span and
this prints, per thread of either process, CPU microseconds, epoll_wait / recvfrom /
writev calls and context switches per transfer (a thread that only blocks once per transfer
switches once; more are preemptions, each a wake-up that took the core). gloo's loop thread only *tries* a pair's lock; while a user
thread holds it the loop calls epoll_wait back to back: a healthy transfer makes a few
epoll_wait calls per loop thread, a spinning one hundreds to thousands (and burns the CPU
the lock holder needs on a loaded host). Needs `perf` with tracepoints (root here).

    python benchmarks/bench_tensor_transport_threads.py               # 1 MB, 1,500 transfers
    python benchmarks/bench_tensor_transport_threads.py --mb 4 --transfers 500 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import tempfile
import time

import torch

import zmesh

EVENTS = ("task-clock,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_recvfrom,"
          "syscalls:sys_enter_writev,context-switches")


@zmesh.remote
class Producer:
    @zmesh.method(tensor_transport="gloo")
    def make(self, nbytes: int):
        return torch.ones(nbytes // 4, dtype=torch.float32)

    def pid(self) -> int:
        return os.getpid()


@zmesh.remote
class Consumer:
    def pid(self) -> int:
        return os.getpid()

    def pull(self, refs: list, transfers: int) -> float:
        """The median time of one read of the (nested, so unresolved) ref, in ms."""
        times = []
        for _ in range(transfers):
            start = time.perf_counter()
            value = zmesh.get(refs[0])
            times.append(time.perf_counter() - start)
            del value
        return statistics.median(times) * 1e3


def per_thread(path: str, names: dict[str, str], transfers: int) -> dict[tuple, dict]:
    """perf stat's per-thread counts -> {(process, comm, tid): {event: per transfer}}."""
    rows: dict[tuple, dict] = {}
    with open(path) as f:
        for line in f:
            cols = line.split()
            if len(cols) < 3 or "-" not in cols[0] or cols[1].startswith("<"):
                continue
            comm, tid = cols[0].rsplit("-", 1)
            event = cols[3] if cols[2] == "msec" else cols[2]
            if not tid.isdigit() or event not in EVENTS:
                continue
            value = float(cols[1].replace(",", ""))
            if event == "task-clock":
                value *= 1e3  # ms -> us
            rows.setdefault((names.get(tid, "?"), comm, tid), {})[event] = value / transfers
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=float, default=1.0, help="tensor size in MB")
    parser.add_argument("--transfers", type=int, default=1500, help="reads per round")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    zmesh.init(num_cpus=4)
    try:
        producer, consumer = Producer.remote(), Consumer.remote()
        pids = {"producer": zmesh.get(producer.pid.remote()),
                "consumer": zmesh.get(consumer.pid.remote())}
        ref = producer.make.remote(int(args.mb * (1 << 20)))
        zmesh.get(consumer.pull.remote([ref], 20))  # the pair is formed and warm
        names = {tid: who for who, pid in pids.items() for tid in os.listdir(f"/proc/{pid}/task")}
        print(f"{args.mb:g} MB, {args.transfers} transfers per round, load average "
              f"{os.getloadavg()[0]:.1f}; per transfer: CPU us, epoll_wait, recvfrom, writev, "
              f"context switches")
        for _ in range(args.rounds):
            with tempfile.NamedTemporaryFile(suffix=".perf") as out:
                perf = subprocess.Popen(
                    ["perf", "stat", "--per-thread", "-e", EVENTS, "-x", " ", "-o", out.name,
                     "-p", f"{pids['producer']},{pids['consumer']}"])
                time.sleep(0.3)  # perf attached
                p50 = zmesh.get(consumer.pull.remote([ref], args.transfers))
                perf.send_signal(signal.SIGINT)
                perf.wait()
                rows = per_thread(out.name, names, args.transfers)
            total = sum(r.get("task-clock", 0.0) for r in rows.values())
            print(f"p50 {p50:.3f} ms, CPU {total:.0f} us per transfer (both processes)")
            for (who, comm, tid), r in sorted(rows.items()):
                if r.get("task-clock", 0.0) >= 3:
                    print(f"  {who:8s} {comm:16s} {tid:>7s} {r.get('task-clock', 0):7.0f} "
                          f"{r.get(EVENTS.split(',')[1], 0):8.1f} "
                          f"{r.get(EVENTS.split(',')[2], 0):6.1f} "
                          f"{r.get(EVENTS.split(',')[3], 0):5.1f} "
                          f"{r.get('context-switches', 0):5.1f}")
    finally:
        zmesh.shutdown()


if __name__ == "__main__":
    main()
