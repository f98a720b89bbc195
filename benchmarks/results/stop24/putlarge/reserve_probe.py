"""The anchor's put_large shape (a warm-up sample, then 3 timed samples of 10 puts of a
100 MiB array, refs dropped after each sample), with the wall-clock time of each phase
boundary printed, so that a trace of the node's fallocate calls (reserve_probe.sh) can be
split into warm-up and timed phases. Also times each put's AllocObject round trip (the
client's allocate: the node's answer, its reservation included, and the writer's mapping).

usage: PYTHONPATH=TREE python reserve_probe.py
"""

from __future__ import annotations

import statistics
import time

import numpy as np

import zmesh as rt
from zmesh.runtime import values

perf = time.perf_counter
ALLOC_S: list[float] = []
_encode = values.encode


def _timed_encode(obj, object_id, *, allocate=None, seal=None, serializer=None):  # type: ignore[no-untyped-def]
    if allocate is not None:
        inner = allocate

        def allocate(oid, size):  # type: ignore[no-untyped-def]
            t = perf()
            out = inner(oid, size)
            ALLOC_S.append(perf() - t)
            return out
    return _encode(obj, object_id, allocate=allocate, seal=seal, serializer=serializer)


def main() -> None:
    values.encode = _timed_encode
    rt.init(num_cpus=2)
    arr = np.arange(100 * 1024 * 1024 // 8, dtype=np.float64)

    def sample() -> list[float]:
        refs, per = [], []
        for _ in range(10):
            t = perf()
            refs.append(rt.put(arr))
            per.append(perf() - t)
        del refs
        return per

    print(f"phase warmup {time.time():.6f}", flush=True)
    warm = sample()
    warm_alloc = list(ALLOC_S)
    ALLOC_S.clear()
    print(f"phase timed {time.time():.6f}", flush=True)
    timed = [s for _ in range(3) for s in sample()]
    print(f"phase end {time.time():.6f}", flush=True)
    ms = 1e3
    print(f"warm-up put p50 {statistics.median(warm) * ms:.2f} ms (alloc p50 "
          f"{statistics.median(warm_alloc) * ms:.2f} ms); timed put p50 "
          f"{statistics.median(timed) * ms:.2f} ms (alloc p50 {statistics.median(ALLOC_S) * ms:.2f} ms)")
    rt.shutdown()


if __name__ == "__main__":
    main()
