"""The in-process workloads of `zmesh microbenchmark`: Ray's anchor benchmark, on zmesh.

Names, counts and definitions mirror `anchor_bench.py` (the shared Ray-vs-zmesh yardstick),
so a figure here means what the anchor's figure of the same name means. Every workload warms
up, then takes REPEATS timed samples of a fixed count; the median is reported.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from micro_everyday import EVERYDAY

NUM_CPUS = 2
REPEATS = 3
LARGE_BYTES = 100 * 1024 * 1024  # "100 MB" = 100 MiB of float64; GB/s uses 1e9 bytes

perf = time.perf_counter
Metric = dict[str, Any]
Results = dict[str, Metric]


class Cfg:
    """Counts for a full run or a `--quick` smoke run (whose figures are not comparable)."""

    def __init__(self, quick: bool) -> None:
        self.quick = quick

    def n(self, full: int, quick: int) -> int:
        return quick if self.quick else full


def metric(samples: list[float], unit: str, better: str, **notes: Any) -> Metric:
    out: Metric = {"value": float(statistics.median(samples)), "unit": unit, "better": better,
                   "samples": [float(s) for s in samples]}
    if notes:
        out["notes"] = notes
    return out


def timed_samples(once: Callable[[], float], reps: int = REPEATS) -> list[float]:
    return [once() for _ in range(reps)]


def kill_all(rt: Any, actors: list[Any]) -> None:
    for a in actors:
        try:
            rt.kill(a)
        except Exception:  # an actor that already died needs no kill
            pass


def w_tasks_sync(rt: Any, cfg: Cfg) -> Results:
    @rt.remote
    def noop() -> None:
        return None

    n = cfg.n(1000, 100)
    for _ in range(cfg.n(100, 20)):
        rt.get(noop.remote())

    def once() -> float:
        t = perf()
        for _ in range(n):
            rt.get(noop.remote())
        return (perf() - t) / n * 1e6

    return {"tasks_sync": metric(timed_samples(once), "us", "lower", round_trips=n)}


def w_tasks_async(rt: Any, cfg: Cfg) -> Results:
    @rt.remote
    def noop() -> None:
        return None

    n = cfg.n(2000, 200)
    rt.get([noop.remote() for _ in range(cfg.n(200, 50))])

    def once() -> float:
        t = perf()
        rt.get([noop.remote() for _ in range(n)])
        return n / (perf() - t)

    return {"tasks_async": metric(timed_samples(once), "tasks/s", "higher", tasks=n)}


def w_task_chain(rt: Any, cfg: Cfg) -> Results:
    @rt.remote
    def inc(x: int) -> int:
        return x + 1

    n = cfg.n(200, 50)

    def chain(k: int) -> None:
        ref = inc.remote(0)
        for _ in range(k - 1):
            ref = inc.remote(ref)
        out = rt.get(ref)
        assert out == k, out

    chain(20)

    def once() -> float:
        t = perf()
        chain(n)
        return n / (perf() - t)

    return {"task_chain": metric(timed_samples(once), "tasks/s", "higher", chain_len=n)}


def _actor_cls(rt: Any) -> Any:
    @rt.remote
    class Noop:
        def noop(self) -> None:
            return None

        def ping(self) -> int:
            return 1

    return Noop


def w_actor_sync(rt: Any, cfg: Cfg) -> Results:
    a = _actor_cls(rt).remote()
    n = cfg.n(1000, 100)
    try:
        for _ in range(cfg.n(100, 20)):
            rt.get(a.noop.remote())

        def once() -> float:
            t = perf()
            for _ in range(n):
                rt.get(a.noop.remote())
            return n / (perf() - t)

        return {"actor_sync": metric(timed_samples(once), "calls/s", "higher", calls=n)}
    finally:
        kill_all(rt, [a])


def w_actor_async(rt: Any, cfg: Cfg) -> Results:
    a = _actor_cls(rt).remote()
    n = cfg.n(5000, 500)
    try:
        rt.get([a.noop.remote() for _ in range(cfg.n(500, 50))])

        def once() -> float:
            t = perf()
            rt.get([a.noop.remote() for _ in range(n)])
            return n / (perf() - t)

        return {"actor_async": metric(timed_samples(once), "calls/s", "higher", calls=n)}
    finally:
        kill_all(rt, [a])


def w_n_n_actor_async(rt: Any, cfg: Cfg) -> Results:
    Noop = _actor_cls(rt)
    actors = [Noop.remote() for _ in range(2)]
    n = cfg.n(5000, 500)
    try:
        rt.get([a.noop.remote() for a in actors for _ in range(cfg.n(500, 50))])

        def once() -> float:
            t = perf()
            refs = [a.noop.remote() for _ in range(n) for a in actors]
            rt.get(refs)
            return len(refs) / (perf() - t)

        return {"n_n_actor_async": metric(timed_samples(once), "calls/s", "higher", actors=2,
                                          calls_per_actor=n)}
    finally:
        kill_all(rt, actors)


def w_put_get_small(rt: Any, cfg: Cfg) -> Results:
    n = cfg.n(10000, 1000)
    warm = [rt.put(i) for i in range(cfg.n(1000, 100))]
    for r in warm:
        rt.get(r)
    rt.get(warm)
    del warm
    puts, gets, batch = [], [], []
    for _ in range(REPEATS):
        t = perf()
        refs = [rt.put(i) for i in range(n)]
        puts.append(n / (perf() - t))
        t = perf()
        for r in refs:
            rt.get(r)
        gets.append(n / (perf() - t))
        t = perf()
        vals = rt.get(refs)
        batch.append(n / (perf() - t))
        assert vals[-1] == n - 1
        del refs, vals
    return {
        "put_small": metric(puts, "puts/s", "higher", objects=n),
        "get_small": metric(gets, "gets/s", "higher", objects=n, how="one get(ref) per object"),
        "get_small_batch": metric(batch, "gets/s", "higher", objects=n,
                                  how="one get(list_of_refs)"),
    }


def w_put_get_large(rt: Any, cfg: Cfg) -> Results:
    arr = np.arange(LARGE_BYTES // 8, dtype=np.float64)  # touched pages, not lazy zeros
    nbytes = arr.nbytes
    n_put, n_get = cfg.n(10, 3), cfg.n(50, 10)
    per_put: list[float] = []

    def put_once() -> float:
        refs = []
        t = perf()
        for _ in range(n_put):
            t0 = perf()
            refs.append(rt.put(arr))
            per_put.append(nbytes / (perf() - t0) / 1e9)
        dt = perf() - t
        del refs
        return n_put * nbytes / dt / 1e9

    put_once()  # warm-up: one whole sample, so the store's memory has been touched once
    per_put.clear()
    put_samples = timed_samples(put_once)
    per_put.sort()

    ref = rt.put(arr)
    a1, a2 = rt.get(ref), rt.get(ref)
    zc = {"owndata": bool(a1.flags.owndata), "writeable": bool(a1.flags.writeable),
          "same_buffer_on_two_gets": bool(a1.ctypes.data == a2.ctypes.data)}
    zc["zero_copy"] = zc["same_buffer_on_two_gets"] and not zc["owndata"]
    assert float(a1[-1]) == float(arr[-1])
    del a1, a2

    def get_once() -> float:
        t = perf()
        for _ in range(n_get):
            x = rt.get(ref)
            del x
        return n_get * nbytes / (perf() - t) / 1e9

    get_samples = timed_samples(get_once)
    return {
        "put_large_gbps": metric(put_samples, "GB/s", "higher", bytes=nbytes, puts=n_put,
                                 per_put_gbps_p10_p50_p90=[round(per_put[int(len(per_put) * q)], 2)
                                                           for q in (0.1, 0.5, 0.9)]),
        "put_large_p50_gbps": {"value": float(statistics.median(per_put)), "unit": "GB/s",
                               "better": "higher", "samples": per_put,
                               "notes": {"how": "median over every timed put"}},
        "get_large_gbps": metric(get_samples, "GB/s", "higher", bytes=nbytes, gets=n_get, **zc),
    }


def w_task_numpy_arg(rt: Any, cfg: Cfg) -> Results:
    @rt.remote
    def total(a: np.ndarray) -> float:
        return float(a.sum())

    arr = np.ones(LARGE_BYTES // 8, dtype=np.float64)
    ref = rt.put(arr)
    n = cfg.n(10, 3)
    assert rt.get(total.remote(ref)) == float(arr.size)

    def once() -> float:
        t = perf()
        for _ in range(n):
            rt.get(total.remote(ref))
        return (perf() - t) / n * 1e3

    samples = timed_samples(once)
    t = perf()
    for _ in range(n):
        arr.sum()
    local_ms = (perf() - t) / n * 1e3  # the compute share: the same sum in the driver
    return {"task_numpy_arg": metric(samples, "ms", "lower", bytes=arr.nbytes, round_trips=n,
                                     local_sum_ms=local_ms)}


def w_wait_1000(rt: Any, cfg: Cfg) -> Results:
    @rt.remote
    def nap(s: float) -> float:
        time.sleep(s)
        return s

    n = cfg.n(1000, 200)
    rng = random.Random(0)
    delays = [rng.uniform(0.0, 0.005) for _ in range(n)]
    w = [nap.remote(0.0) for _ in range(50)]
    rt.wait(w, num_returns=len(w))
    rt.get(w)

    def once() -> float:
        t = perf()
        refs = [nap.remote(d) for d in delays]
        ready, rest = rt.wait(refs, num_returns=len(refs))
        assert len(ready) == n and not rest
        return (perf() - t) * 1e3

    return {"wait_1000": metric(timed_samples(once), "ms", "lower", tasks=n,
                                ideal_ms_on_2_cpus=sum(delays) / NUM_CPUS * 1e3,
                                how="first submit -> wait(num_returns=all) returns")}


def w_actor_create(rt: Any, cfg: Cfg) -> Results:
    Noop = _actor_cls(rt)
    n = cfg.n(20, 5)
    warm = [Noop.remote() for _ in range(2)]
    rt.get([a.ping.remote() for a in warm])
    kill_all(rt, warm)
    time.sleep(0.5)  # as the anchor does: killed workers exit before timing starts

    def once() -> float:
        t = perf()
        actors = [Noop.remote() for _ in range(n)]
        out = rt.get([a.ping.remote() for a in actors])
        dt = perf() - t
        assert sum(out) == n
        kill_all(rt, actors)
        time.sleep(1.0)  # untimed, as in the anchor: let killed workers exit between samples
        return n / dt

    return {"actor_create": metric(timed_samples(once), "actors/s", "higher", actors=n,
                                   how="default actor options; create n, one ping each")}


def w_pg_create_remove(rt: Any, cfg: Cfg) -> Results:
    n = cfg.n(50, 10)
    for _ in range(3):
        pg = rt.util.placement_group([{"CPU": 1}], strategy="PACK")
        rt.get(pg.ready(), timeout=60)
        rt.util.remove_placement_group(pg)
    ready_ms: list[float] = []

    def once() -> float:
        t = perf()
        for _ in range(n):
            t0 = perf()
            pg = rt.util.placement_group([{"CPU": 1}], strategy="PACK")
            rt.get(pg.ready(), timeout=60)
            ready_ms.append((perf() - t0) * 1e3)
            rt.util.remove_placement_group(pg)
        return n / (perf() - t)

    samples = timed_samples(once)
    ready_ms.sort()
    return {"pg_create_remove": metric(samples, "pgs/s", "higher", pgs=n,
                                       how="create 1x{CPU:1}, get(pg.ready()), remove",
                                       create_to_ready_ms_p50=ready_ms[len(ready_ms) // 2],
                                       create_to_ready_ms_max=ready_ms[-1])}


#: workload name -> (function, the metric names it reports), in the anchor's order
INPROC: dict[str, tuple[Callable[[Any, Cfg], Results], list[str]]] = {
    "tasks_sync": (w_tasks_sync, ["tasks_sync"]),
    "tasks_async": (w_tasks_async, ["tasks_async"]),
    "task_chain": (w_task_chain, ["task_chain"]),
    "actor_sync": (w_actor_sync, ["actor_sync"]),
    "actor_async": (w_actor_async, ["actor_async"]),
    "n_n_actor_async": (w_n_n_actor_async, ["n_n_actor_async"]),
    "put_get_small": (w_put_get_small, ["put_small", "get_small", "get_small_batch"]),
    "put_get_large": (w_put_get_large, ["put_large_gbps", "put_large_p50_gbps",
                                        "get_large_gbps"]),
    "task_numpy_arg": (w_task_numpy_arg, ["task_numpy_arg"]),
    "wait_1000": (w_wait_1000, ["wait_1000"]),
    "actor_create": (w_actor_create, ["actor_create"]),
    "pg_create_remove": (w_pg_create_remove, ["pg_create_remove"]),
    # beyond the anchor: the everyday APIs (streaming generators, ActorPool, Queue); Ray's
    # side runs with `python benchmarks/micro_everyday.py --backend ray`
    **EVERYDAY,
}
