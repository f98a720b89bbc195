"""Where a synchronous actor call's time goes, thread by thread (the anchor's `actor_sync`).

A driver calls `get(a.noop.remote())` in a loop; this reports calls/s, the latency of single
calls (p50/p90/p99, and how many took over 1.5 ms), and for every thread of the driver and of
the actor's worker its CPU time (user/system) and its wake-ups (voluntary context switches)
and preemptions (involuntary ones) per call, read from /proc (Linux only); "cpu us" is the
scheduler's exact run time (schedstat), user/sys the sampled clock ticks. The figures that
wall-clock swings on a shared host hide show here: a hand-off between threads is a wake-up,
a thread woken while another holds the GIL sleeps and wakes again, and CPU per call is what
bounds calls/s when every core is busy.

    python benchmarks/bench_actor_sync_threads.py [--calls 2000] [--rounds 3] [--json F]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
from typing import Any

TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def thread_counters(pid: int) -> dict[int, tuple[str, float, float, int, int, float]]:
    """tid -> (comm, user s, system s, voluntary switches, involuntary switches, CPU s).

    user/system come in clock ticks (sampled); the last figure is the scheduler's exact
    run time of the thread (/proc/.../schedstat, ns), which short runs need."""
    out: dict[int, tuple[str, float, float, int, int, float]] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                comm = f.read().strip()
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            switches = {}
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if "ctxt_switches" in line:
                        key, value = line.split(":")
                        switches[key.strip()] = int(value)
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    run_s = int(f.read().split()[0]) / 1e9
            except OSError:  # a kernel without schedstats: the ticks only
                run_s = -1.0
        except OSError:  # the thread ended meanwhile
            continue
        out[int(tid)] = (comm, int(fields[11]) * TICK_S, int(fields[12]) * TICK_S,
                         switches.get("voluntary_ctxt_switches", 0),
                         switches.get("nonvoluntary_ctxt_switches", 0), run_s)
    return out


def per_call(before: dict[int, Any], after: dict[int, Any], names: dict[int, str],
             calls: int) -> list[dict[str, Any]]:
    rows = []
    for tid, (comm, user, system, vol, invol, run) in sorted(after.items()):
        if tid not in before:
            continue
        _, user0, system0, vol0, invol0, run0 = before[tid]
        row = {"thread": names.get(tid, comm), "tid": tid,
               "user_us": (user - user0) / calls * 1e6, "sys_us": (system - system0) / calls * 1e6,
               "cpu_us": (run - run0) / calls * 1e6 if run0 >= 0 else -1.0,
               "wakeups": (vol - vol0) / calls, "preempted": (invol - invol0) / calls}
        if row["user_us"] + row["sys_us"] > 0 or row["wakeups"] > 0.05:
            rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="calls per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", help="write the figures here too")
    args = parser.parse_args()

    import zmesh

    zmesh.init(num_cpus=2)

    @zmesh.remote
    class Noop:
        def noop(self) -> None:
            return None

        def threads(self) -> tuple[int, dict[int, str]]:
            names = {t.native_id or 0: t.name for t in threading.enumerate()}
            # (a forked worker's main thread may keep its parent's native id in `threading`)
            names[os.getpid()] = threading.main_thread().name
            return os.getpid(), names

    try:
        actor = Noop.remote()  # type: ignore[attr-defined]
        worker_pid, worker_names = zmesh.get(actor.threads.remote())
        driver_names = {t.native_id or 0: t.name for t in threading.enumerate()}
        for _ in range(300):
            zmesh.get(actor.noop.remote())
        rates, latencies = [], []
        driver0, worker0 = thread_counters(os.getpid()), thread_counters(worker_pid)
        for _ in range(args.rounds):
            start = time.perf_counter()
            for _ in range(args.calls):
                t = time.perf_counter()
                zmesh.get(actor.noop.remote())
                latencies.append(time.perf_counter() - t)
            rates.append(args.calls / (time.perf_counter() - start))
        driver1, worker1 = thread_counters(os.getpid()), thread_counters(worker_pid)
    finally:
        zmesh.shutdown()
    n = args.calls * args.rounds
    latencies.sort()
    report = {
        "calls_per_s": statistics.median(rates), "rates": rates,
        "latency_us": {q: latencies[int(len(latencies) * f)] * 1e6
                       for q, f in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))},
        "over_1_5_ms": sum(1 for x in latencies if x > 0.0015),
        "driver": per_call(driver0, driver1, driver_names, n),
        "worker": per_call(worker0, worker1, worker_names, n),
    }
    lat = report["latency_us"]
    print(f"actor_sync: {report['calls_per_s']:.0f} calls/s (rounds: "
          f"{' '.join(f'{r:.0f}' for r in rates)}); latency p50 {lat['p50']:.0f} us, "
          f"p90 {lat['p90']:.0f} us, p99 {lat['p99']:.0f} us, "
          f"{report['over_1_5_ms']} of {n} over 1.5 ms")
    print(f"{'process':8s} {'thread':24s} {'cpu us':>7s} {'user us':>8s} {'sys us':>7s} "
          f"{'wake-ups':>9s} {'preempted':>10s}   (per call)")
    for side in ("driver", "worker"):
        for row in report[side]:
            print(f"{side:8s} {row['thread'][:24]:24s} {row['cpu_us']:7.1f} {row['user_us']:8.1f} "
                  f"{row['sys_us']:7.1f} {row['wakeups']:9.2f} {row['preempted']:10.2f}")
        rows = report[side]
        print(f"{side:8s} {'(all threads)':24s} {sum(r['cpu_us'] for r in rows):7.1f} "
              f"{sum(r['user_us'] for r in rows):8.1f} {sum(r['sys_us'] for r in rows):7.1f} "
              f"{sum(r['wakeups'] for r in rows):9.2f} {sum(r['preempted'] for r in rows):10.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
