"""Everyday-API workloads, for zmesh and for Ray: a streaming generator, ActorPool.map, Queue.

Each takes the runtime module as `rt` (zmesh, or ray in its own environment), so the same
code measures both. `zmesh microbenchmark --only streaming_gen,actor_pool_map,queue_roundtrip`
runs them on zmesh; for Ray, in a virtual environment that has it:

    /work/ray-venv/bin/python benchmarks/micro_everyday.py --backend ray --json ray.json
    python benchmarks/micro_everyday.py --backend zmesh --json zmesh.json
    python benchmarks/micro_everyday.py --compare ray.json zmesh.json   # > 1: zmesh better

- streaming_gen: a task yields 10,000 small ints; the caller iterates the generator and gets
  each ref. `streaming_gen_items` is items/s from submission to the last value;
  `streaming_gen_first_ms` the time from submission to the first value.
- actor_pool_map: `list(ActorPool([a1, a2]).map(lambda a, v: a.double.remote(v), range(1000)))`,
  items/s.
- queue_roundtrip: `q.put(i); q.get()` on an actor-backed Queue, round trips/s.
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

perf = time.perf_counter
REPEATS = 3
Metric = dict[str, Any]
Results = dict[str, Metric]


class _Cfg:
    def __init__(self, quick: bool) -> None:
        self.quick = quick

    def n(self, full: int, quick: int) -> int:
        return quick if self.quick else full


def _metric(samples: list[float], unit: str, better: str, **notes: Any) -> Metric:
    out: Metric = {"value": float(statistics.median(samples)), "unit": unit, "better": better,
                   "samples": [float(s) for s in samples]}
    if notes:
        out["notes"] = notes
    return out


def w_streaming_gen(rt: Any, cfg: Any) -> Results:
    n = cfg.n(10_000, 1_000)

    @rt.remote(num_returns="streaming")
    def produce(k: int) -> Any:
        # a for loop, not `yield from range(k)`: Ray drives generators with send(), which
        # a range iterator does not have
        for i in range(k):  # noqa: UP028
            yield i

    def once() -> tuple[float, float]:
        t = perf()
        gen = produce.remote(n)
        first = rt.get(next(gen))
        t_first = perf() - t
        total = first
        for ref in gen:
            total += rt.get(ref)
        elapsed = perf() - t
        assert total == n * (n - 1) // 2
        return n / elapsed, t_first * 1e3

    once()  # warm-up: a worker, the function exported
    runs = [once() for _ in range(REPEATS)]
    firsts = []
    for _ in range(cfg.n(10, 3)):  # time to first item on its own, with a short generator
        t = perf()
        gen = produce.remote(2)
        rt.get(next(gen))
        firsts.append((perf() - t) * 1e3)
        for ref in gen:
            rt.get(ref)
    return {"streaming_gen_items": _metric([r[0] for r in runs], "items/s", "higher", items=n),
            "streaming_gen_first_ms": _metric(firsts, "ms", "lower",
                                              with_10k_items=[r[1] for r in runs])}


def w_actor_pool_map(rt: Any, cfg: Any) -> Results:
    n = cfg.n(1000, 200)
    util = importlib.import_module(f"{rt.__name__}.util")

    @rt.remote
    class Doubler:
        def double(self, v: int) -> int:
            return 2 * v

    actors = [Doubler.remote() for _ in range(2)]
    pool = util.ActorPool(actors)
    try:
        list(pool.map(lambda a, v: a.double.remote(v), range(50)))

        def once() -> float:
            t = perf()
            out = list(pool.map(lambda a, v: a.double.remote(v), range(n)))
            elapsed = perf() - t
            assert out == [2 * v for v in range(n)]
            return n / elapsed

        return {"actor_pool_map": _metric([once() for _ in range(REPEATS)], "items/s",
                                          "higher", items=n, actors=2)}
    finally:
        for a in actors:
            rt.kill(a)


def w_queue_roundtrip(rt: Any, cfg: Any) -> Results:
    n = cfg.n(1000, 200)
    queue_mod = importlib.import_module(f"{rt.__name__}.util.queue")
    q = queue_mod.Queue()
    try:
        for i in range(50):
            q.put(i)
            q.get()

        def once() -> float:
            t = perf()
            for i in range(n):
                q.put(i)
                assert q.get() == i
            return n / (perf() - t)

        return {"queue_roundtrip": _metric([once() for _ in range(REPEATS)], "round trips/s",
                                           "higher", round_trips=n)}
    finally:
        q.shutdown()


#: workload name -> (function, the metric names it reports)
EVERYDAY: dict[str, tuple[Callable[[Any, Any], Results], list[str]]] = {
    "streaming_gen": (w_streaming_gen, ["streaming_gen_items", "streaming_gen_first_ms"]),
    "actor_pool_map": (w_actor_pool_map, ["actor_pool_map"]),
    "queue_roundtrip": (w_queue_roundtrip, ["queue_roundtrip"]),
}


def _run(backend: str, quick: bool, only: list[str]) -> dict[str, Any]:
    rt = importlib.import_module(backend)
    if backend == "ray":
        rt.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    else:
        rt.init(num_cpus=2)
    results: Results = {}
    try:
        for name, (fn, _) in EVERYDAY.items():
            if not only or name in only:
                results.update(fn(rt, _Cfg(quick)))
    finally:
        rt.shutdown()
    return {"backend": backend, "backend_version": getattr(rt, "__version__", "?"),
            "quick": quick, "results": results}


def _compare(ray_doc: dict[str, Any], zm_doc: dict[str, Any]) -> None:
    print(f"{'metric':26} {'ray':>14} {'zmesh':>14} {'zmesh/ray':>10}")
    for name, r in ray_doc["results"].items():
        z = zm_doc["results"].get(name)
        if z is None:
            continue
        ratio = z["value"] / r["value"] if r["better"] == "higher" else r["value"] / z["value"]
        print(f"{name:26} {r['value']:>14,.2f} {z['value']:>14,.2f} {ratio:>9.1f}x  "
              f"({r['unit']}, {r['better']} is better)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backend", choices=["zmesh", "ray"], default="zmesh")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--only", default="")
    p.add_argument("--json", default="")
    p.add_argument("--compare", nargs=2, metavar=("RAY_JSON", "ZMESH_JSON"))
    args = p.parse_args(argv)
    if args.compare:
        with open(args.compare[0]) as f1, open(args.compare[1]) as f2:
            _compare(json.load(f1), json.load(f2))
        return 0
    doc = _run(args.backend, args.quick, [s for s in args.only.split(",") if s])
    for name, m in doc["results"].items():
        print(f"{name:26} {m['value']:>14,.2f} {m['unit']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
