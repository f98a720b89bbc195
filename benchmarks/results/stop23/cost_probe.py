"""One anchor workload's loop, N operations, in a fresh runtime: python cost_probe.py WORKLOAD N

The loop bodies are the anchor's (/work/shared/bench/anchor_bench.py), with its warm-up
first; only the number of timed operations changes with N, so that the difference between
two runs (N1, N2) of a process tree's instruction count is the cost of N2 - N1 operations
(start-up, warm-up and shutdown cancel). Set-up that the anchor times together with the
operation but that is not the operation (get_small's puts) is sized by NFIX, fixed across N.

With --cpu, it also prints the CPU time (/proc/<pid>/task/*/schedstat, ns, user + system,
every thread) that the driver and every descendant spent over the N operations, as
"CPU_NS <total> <per-process ...>", read right before and right after the loop.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import time

import numpy as np

import zmesh as rt

LARGE_BYTES = 100 * 1024 * 1024


def pg_create(bundles):
    fn = getattr(rt, "placement_group", None) or rt.util.placement_group
    return fn(bundles, strategy="PACK")


def pg_remove(pg):
    fn = getattr(rt, "remove_placement_group", None) or rt.util.remove_placement_group
    fn(pg)


def pg_wait_ready(pg, timeout=60.0):
    if hasattr(pg, "ready"):
        rt.get(pg.ready(), timeout=timeout)
    elif not pg.wait(timeout):
        raise TimeoutError("placement group not ready")


def tree_pids() -> list[int]:
    """The driver and all its descendants (from /proc/*/stat ppid)."""
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                text = f.read()
        except OSError:
            continue
        ppid = int(text.rsplit(")", 1)[1].split()[1])
        kids.setdefault(ppid, []).append(int(name))
    out, todo = [], [os.getpid()]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(kids.get(pid, []))
    return out


def cpu_ns() -> dict[int, int]:
    found = {}
    for pid in tree_pids():
        total = 0
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    total += int(f.read().split()[0])
        except OSError:
            continue
        found[pid] = total
    return found


class Probe:
    def __init__(self, want_cpu: bool):
        self.want_cpu = want_cpu

    def __enter__(self):
        if self.want_cpu:
            self.c0 = cpu_ns()
        self.t0 = time.perf_counter()
        os.getsid(0)  # marker: callgrind --zero-before=os_getsid (driver_cost.sh)
        return self

    def __exit__(self, *exc):
        os.getpriority(os.PRIO_PROCESS, 0)  # marker: callgrind --dump-before=os_getpriority
        print(f"LOOP_S {time.perf_counter() - self.t0:.3f}", flush=True)
        if self.want_cpu and exc[0] is None:
            c1 = cpu_ns()
            # a process that exited inside the loop is missed (none should: no worker
            # retires within 10 s of having been used)
            per = {pid: c1[pid] - self.c0.get(pid, 0) for pid in c1}
            print("CPU_NS", sum(per.values()), " ".join(f"{p}:{v}" for p, v in sorted(per.items())),
                  flush=True)
        return False


def _actor_cls():
    @rt.remote
    class Noop:
        def noop(self):
            return None

        def ping(self):
            return 1

    return Noop


def w_tasks_async(n, probe):
    @rt.remote
    def noop():
        return None

    rt.get([noop.remote() for _ in range(200)])
    with probe:
        refs = [noop.remote() for _ in range(n)]
        rt.get(refs)
        del refs


def w_actor_async(n, probe):
    a = _actor_cls().remote()
    rt.get([a.noop.remote() for _ in range(500)])
    with probe:
        refs = [a.noop.remote() for _ in range(n)]
        rt.get(refs)
        del refs


def w_n_n_actor_async(n, probe):
    noop_cls = _actor_cls()
    actors = [noop_cls.remote() for _ in range(2)]
    rt.get([a.noop.remote() for a in actors for _ in range(500)])
    with probe:
        refs = []
        for _ in range(n):
            for a in actors:
                refs.append(a.noop.remote())
        rt.get(refs)
        del refs


NFIX = 30000


def _small_warm():
    warm = [rt.put(i) for i in range(1000)]
    for r in warm:
        rt.get(r)
    rt.get(warm)
    del warm


def w_get_small(n, probe):
    _small_warm()
    refs = [rt.put(i) for i in range(NFIX)]
    with probe:
        for r in refs[:n]:
            rt.get(r)
    del refs


def w_get_small_batch(n, probe):
    _small_warm()
    refs = [rt.put(i) for i in range(NFIX)]
    with probe:
        vals = rt.get(refs[:n])
        assert vals[-1] == n - 1
        del vals
    del refs


def w_put_small(n, probe):
    _small_warm()
    with probe:
        refs = [rt.put(i) for i in range(n)]
        del refs


def w_put_large(n, probe):
    arr = np.arange(LARGE_BYTES // 8, dtype=np.float64)
    refs = [rt.put(arr) for _ in range(3)]  # warm-up: the store's memory touched once
    del refs
    with probe:
        refs = [rt.put(arr) for _ in range(n)]
        del refs


def w_wait_1000(n, probe):
    @rt.remote
    def nap(s):
        import time as _t

        _t.sleep(s)
        return s

    rng = random.Random(0)
    delays = [rng.uniform(0.0, 0.005) for _ in range(n)]
    w = [nap.remote(0.0) for _ in range(50)]
    rt.wait(w, num_returns=len(w))
    rt.get(w)
    with probe:
        refs = [nap.remote(d) for d in delays]
        ready, rest = rt.wait(refs, num_returns=len(refs))
        assert len(ready) == n and not rest
        del refs, ready, rest


def w_idle(n, probe):
    """No operation: n tenths of a second of sleep (what the mesh's timers cost per second)."""
    @rt.remote
    def noop():
        return None

    rt.get([noop.remote() for _ in range(20)])
    with probe:
        time.sleep(n / 10)


def w_pg_create_remove(n, probe):
    for _ in range(3):
        pg = pg_create([{"CPU": 1}])
        pg_wait_ready(pg)
        pg_remove(pg)
    with probe:
        for _ in range(n):
            pg = pg_create([{"CPU": 1}])
            pg_wait_ready(pg)
            pg_remove(pg)


WORKLOADS = {name[2:]: fn for name, fn in globals().items() if name.startswith("w_")}


def stop_workers() -> None:
    """SIGTERM every worker (driver -> node -> fork server -> worker) and wait until they
    are gone: shutdown SIGKILLs them, and a process killed so writes no cachegrind counts,
    while one ended by SIGTERM does. Actors are not rt.kill()ed for the same reason."""
    me = os.getpid()
    depth = {me: 0}
    for pid in tree_pids():  # parents come before their children in tree_pids' order
        if pid != me:
            depth[pid] = depth.get(_ppid(pid), -9) + 1
    workers = [pid for pid, d in depth.items() if d == 3]
    for pid in workers:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    end = time.monotonic() + 60
    while time.monotonic() < end and any(_alive(pid) for pid in workers):
        time.sleep(0.05)
    print("WORKERS_STOPPED", len(workers), flush=True)


def _ppid(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except OSError:
        return -1


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    name, n = args[0], int(args[1])
    rt.init(num_cpus=2)
    try:
        WORKLOADS[name](n, Probe("--cpu" in sys.argv))
        stop_workers()
    finally:
        rt.shutdown()


if __name__ == "__main__":
    main()
