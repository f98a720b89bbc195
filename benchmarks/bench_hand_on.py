"""What the borrow note costs: the round trip of a task that returns a ref it borrows.

Three cases on `zmesh.init(num_cpus=2)` (one host), interleaved call by call so that the
machine's load hits each alike, p50/p90 of the driver's `get` of the task's result:

- `relay`: the task returns a ref its caller gave it as an argument (no note: the caller
  holds it until it has the answer);
- `fetch_ref`: the task gets `[X]` from an actor's call and returns `X` (the actor owns it:
  the worker tells the actor first and answers once acknowledged);
- `fetch_value`: the same work, returning `X`'s value (no ref handed on).

Run it from a checkout (workers import zmesh from the driver's cwd); for a before/after
comparison alternate two checkouts in one sitting.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import zmesh


@zmesh.remote
class Maker:
    def make(self, v: int) -> list[Any]:
        return [zmesh.put(v)]


@zmesh.remote
def relay(box: list[Any]) -> list[Any]:
    return [box[0]]


@zmesh.remote
def fetch_ref(maker: Any, v: int) -> list[Any]:
    return [zmesh.get(maker.make.remote(v))[0]]


@zmesh.remote
def fetch_value(maker: Any, v: int) -> Any:
    return zmesh.get(zmesh.get(maker.make.remote(v))[0])


def main(n: int = 200) -> None:
    zmesh.init(num_cpus=2)
    maker = Maker.remote()
    own = zmesh.put(2)
    cases = (("relay", relay, ([own],)), ("fetch_value", fetch_value, (maker, 1)),
             ("fetch_ref", fetch_ref, (maker, 1)))
    out: dict[str, list[float]] = {name: [] for name, _, _ in cases}
    for _ in range(20):
        for _, fn, args in cases:
            zmesh.get(fn.remote(*args))
    for _ in range(n):
        for name, fn, args in cases:
            t = time.perf_counter()
            r = zmesh.get(fn.remote(*args))
            out[name].append(time.perf_counter() - t)
            del r
    for name, ts in out.items():
        ts.sort()
        print(f"{name}: p50 {statistics.median(ts) * 1e3:.3f} ms  "
              f"p90 {ts[int(len(ts) * 0.9)] * 1e3:.3f} ms")
    zmesh.shutdown()


if __name__ == "__main__":
    main()
