"""Object store put and get paths against the memcpy ceiling and a fresh file per object.

    python benchmarks/bench_object_store.py [--quick] [--size-mb N]

put (steady state): allocate + copy into `writable(loc)` + seal, then free, so the region
is reused. get: pin + `readable` + np.frombuffer + drop the view + unpin.
"""

from __future__ import annotations

import argparse
import gc
import mmap
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable

import numpy as np

from zmesh.store.mapping import StoreMapper
from zmesh.store.object_store import ObjectStore

MiB = 1 << 20


def timed(fn: Callable[[], object], reps: int) -> float:
    """Median seconds of `reps` runs of fn."""
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def memcpy_ceiling(src: np.ndarray, reps: int) -> float:
    """Median seconds to copy `src` into a buffer already touched."""
    touched = np.ones(len(src), dtype=np.uint8)
    return timed(lambda: np.copyto(touched, src), reps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--size-mb", type=int, default=100)
    args = parser.parse_args()
    reps = 5 if args.quick else 20
    size = args.size_mb * MiB
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    root = tempfile.mkdtemp(prefix="zmesh-bench-", dir=base)
    src = np.frombuffer(os.urandom(size), dtype=np.uint8)
    rows: list[tuple[str, str]] = []

    def gbps(seconds: float) -> str:
        return f"{size / seconds / 1e9:6.2f} GB/s  ({seconds * 1e3:7.2f} ms)"

    try:
        rows.append(("np.copyto into touched memory", gbps(memcpy_ceiling(src, reps))))

        # A fresh /dev/shm file per object: the page faults the arena avoids.
        counter = iter(range(10**9))

        def fresh_file() -> None:
            path = os.path.join(root, f"fresh-{next(counter)}")
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            os.ftruncate(fd, size)
            mm = mmap.mmap(fd, size)
            os.close(fd)
            a = np.frombuffer(mm, dtype=np.uint8)
            np.copyto(a, src)
            del a
            mm.close()
            os.unlink(path)

        rows.append(("fresh file per put (create+map+copy)", gbps(timed(fresh_file, reps))))

        store = ObjectStore(os.path.join(root, "node"), 4 * size + 64 * MiB)
        mapper = StoreMapper(store.directory)
        ids = iter(i.to_bytes(20, "big") for i in range(10**9))

        def put() -> bytes:
            oid = next(ids)
            loc = store.allocate(oid, size, owner="bench")
            with mapper.writable(loc) as view:
                np.copyto(np.frombuffer(view, dtype=np.uint8), src)
            store.seal(oid)
            return oid

        t = time.perf_counter()
        first = put()
        rows.append(("first put into a new segment (cold)", gbps(time.perf_counter() - t)))
        store.free(first)

        def put_then_free() -> None:
            store.free(put())

        put_then_free()
        put_s = timed(put_then_free, reps)
        rows.append(("store put, steady state (region reused)", gbps(put_s)))

        def bookkeeping() -> None:
            oid = next(ids)
            store.allocate(oid, size, owner="bench")
            store.seal(oid)
            store.free(oid)

        rows.append(
            ("  of which allocate+seal+free", f"{timed(bookkeeping, reps * 50) * 1e6:8.1f} us")
        )

        oid = put()
        other = StoreMapper(store.directory)
        t = time.perf_counter()
        view = other.readable(store.pin(oid, "cold"), lambda: None)
        arr = np.frombuffer(view, dtype=np.uint8)
        rows.append(
            ("get, first in a process (map+prefault)", f"{(time.perf_counter() - t) * 1e3:8.2f} ms")
        )
        del view, arr
        store.unpin(oid, "cold")

        def get() -> None:
            loc = store.pin(oid, "reader")
            view = mapper.readable(loc, lambda: store.unpin(oid, "reader"))
            arr = np.frombuffer(view, dtype=np.uint8)
            del view, arr

        get()
        gc.collect()
        rows.append(
            ("get: pin+readable+frombuffer+unpin", f"{timed(get, reps * 50) * 1e6:8.1f} us")
        )
        assert store.stats().num_pinned == 0
        other.close()
        mapper.close()
        store.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)

    print(f"object store, {args.size_mb} MiB objects, median of {reps} runs")
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"  {name:<{width}}  {value}")


if __name__ == "__main__":
    main()
