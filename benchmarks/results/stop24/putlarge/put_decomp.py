"""Where a warm 100 MiB put's time goes: the AllocObject round trip (client.allocate: the
node's answer and the writer's mapping), the copy into the store (layout.pack_into), and the
whole put. A warm-up sample first, then N samples of 10 puts (refs dropped after each).

usage: PYTHONPATH=TREE python put_decomp.py [N]
"""

from __future__ import annotations

import os
import statistics
import sys
import time

import numpy as np

import zmesh as rt
from zmesh.runtime import values
from zmesh.serializers import layout

perf = time.perf_counter
T: dict[str, list[float]] = {"alloc": [], "pack": [], "put": []}
_pack_into = layout.pack_into
_encode = values.encode


def _timed_pack_into(s, dest):  # type: ignore[no-untyped-def]
    t = perf()
    out = _pack_into(s, dest)
    T["pack"].append(perf() - t)
    return out


def _timed_encode(obj, object_id, *, allocate=None, seal=None, serializer=None):  # type: ignore[no-untyped-def]
    if allocate is not None:
        inner = allocate

        def allocate(oid, size):  # type: ignore[no-untyped-def]
            t = perf()
            out = inner(oid, size)
            T["alloc"].append(perf() - t)
            return out
    return _encode(obj, object_id, allocate=allocate, seal=seal, serializer=serializer)


def main() -> None:
    layout.pack_into = _timed_pack_into
    values.encode = _timed_encode
    rt.init(num_cpus=2)
    arr = np.arange(100 * 1024 * 1024 // 8, dtype=np.float64)

    def sample() -> None:
        refs = []
        for _ in range(10):
            t = perf()
            refs.append(rt.put(arr))
            T["put"].append(perf() - t)
        del refs

    sample()
    for v in T.values():
        v.clear()
    for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 5):
        sample()
    tree = os.path.dirname(os.path.dirname(rt.__file__))
    print(tree, " ".join(f"{k} p50 {statistics.median(v) * 1e3:.3f} ms min {min(v) * 1e3:.3f}"
                         for k, v in T.items()))
    rt.shutdown()


if __name__ == "__main__":
    main()
