"""Fresh pages for a 100 MiB object in /dev/shm, two ways, alternated (6 rounds, medians):

- fallocate: what the node does now (posix_fallocate in 16 MiB pieces), then the writer's
  MADV_POPULATE_WRITE over its mapping (already-allocated pages) and its copy;
- populate: no reservation; the writer's MADV_POPULATE_WRITE allocates the pages itself
  (it returns EFAULT where a write would SIGBUS, so it could keep the no-SIGBUS guarantee),
  then the copy.

usage: python writer_populate.py
"""

from __future__ import annotations

import mmap
import os
import time

import numpy as np

MADV_POPULATE_WRITE = 23
N = 100 << 20
PIECE = 16 << 20
perf = time.perf_counter


def once(mode: str, src: np.ndarray) -> tuple[float, float, float]:
    path = f"/dev/shm/writer-populate-{os.getpid()}"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.ftruncate(fd, N)
        t0 = perf()
        if mode == "fallocate":
            for off in range(0, N, PIECE):
                os.posix_fallocate(fd, off, PIECE)
        t1 = perf()
        with mmap.mmap(fd, N) as mm:
            mm.madvise(MADV_POPULATE_WRITE, 0, N)
            t2 = perf()
            dest = np.frombuffer(mm, dtype=np.float64)
            dest[:] = src
            del dest
            t3 = perf()
    finally:
        os.close(fd)
        os.unlink(path)
    return t1 - t0, t2 - t1, t3 - t2


def main() -> None:
    src = np.arange(N // 8, dtype=np.float64)
    runs: dict[str, list[tuple[float, float, float]]] = {"fallocate": [], "populate": []}
    for _ in range(6):
        for mode, out in runs.items():
            out.append(once(mode, src))
    for mode, out in runs.items():
        out.sort(key=sum)
        r, p, c = out[len(out) // 2]
        print(f"{mode:9s} median total {(r + p + c) * 1e3:.1f} ms: reserve {r * 1e3:.1f}, "
              f"writer populate {p * 1e3:.1f}, copy {c * 1e3:.1f}")


if __name__ == "__main__":
    main()
