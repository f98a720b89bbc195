"""CPU and wake-ups of two idle actors' threads and of the node, before and after the actors
join a collective group (5 s windows by default). Run from the repository root with
PYTHONPATH=benchmarks (the actors import bench_collective's helpers).

    PYTHONPATH=benchmarks python benchmarks/results/stop21/scripts/idle_group_threads.py 5
"""

import os
import sys
import time

from bench_collective import node_pids, proc_cpu_s, threads_now

import zmesh
import zmesh.collective as col


@zmesh.remote
class M:
    def pid(self) -> int:
        return os.getpid()

    def join(self) -> None:
        col.barrier("g")

    def snap(self) -> dict:
        return threads_now()


def window(label: str, ms: list, pids: list[int], node: list[int], s: float) -> None:
    before = zmesh.get([m.snap.remote() for m in ms])
    n0, m0 = proc_cpu_s(node), proc_cpu_s(pids)
    time.sleep(s)  # the idle window being measured, not a synchronization
    n1, m1 = proc_cpu_s(node), proc_cpu_s(pids)
    after = zmesh.get([m.snap.remote() for m in ms])
    kinds: dict[str, list[float]] = {}
    for b, a in zip(before, after):
        for tid, (kind, run, slices) in a.items():
            _, run0, slices0 = b.get(tid, (kind, 0, 0))
            acc = kinds.setdefault(kind, [0.0, 0.0])
            acc[0] += (run - run0) / 1e6 / s
            acc[1] += (slices - slices0) / s
    print(f"{label}: node {(n1 - n0) / s * 1e3:.2f} ms/s, members {(m1 - m0) / s * 1e3:.2f} "
          f"ms/s; by thread kind (ms/s, wake-ups/s) "
          + ", ".join(f"{k} {v[0]:.2f}/{v[1]:.1f}" for k, v in kinds.items())
          + f"; load {os.getloadavg()[0]:.1f}", flush=True)


def main() -> None:
    s = float(sys.argv[1]) if len(sys.argv) > 1 else 5.0
    zmesh.init(num_cpus=4)
    ms = [M.remote() for _ in range(2)]
    pids, node = zmesh.get([m.pid.remote() for m in ms]), node_pids()
    for _ in range(2):
        window("idle, no group", ms, pids, node, s)
    col.create_collective_group(ms, 2, [0, 1], backend="gloo", group_name="g")
    zmesh.get([m.join.remote() for m in ms])
    for _ in range(2):
        window("idle, in a group", ms, pids, node, s)
    zmesh.shutdown()


if __name__ == "__main__":
    main()
