"""CPU per task of a task chain (chains of CHAIN_LEN=200, as the anchor's) or a fan-out of
noops, summed over every process of the runtime (driver, node, fork server, workers) from
their CPU times: steadier than wall time on a shared host.

    python task_chain_cpu.py chain|fan    (CHAIN_N tasks a sample, CHAIN_REP samples)
"""

from __future__ import annotations

import json
import os
import sys
import time

import psutil

import zmesh as rt

N = int(os.environ.get("CHAIN_N", "5000"))
REP = int(os.environ.get("CHAIN_REP", "4"))
LENGTH = int(os.environ.get("CHAIN_LEN", "200"))


def cpu_by_role(me: psutil.Process) -> dict[int, tuple[str, float]]:
    out = {}
    for p in [me] + me.children(recursive=True):
        try:
            t = p.cpu_times()
            role = "driver" if p.pid == me.pid else "node" if p.ppid() == me.pid else "worker"
            out[p.pid] = (role, t.user + t.system)
        except psutil.Error:
            pass
    return out


def main() -> None:
    what = sys.argv[1] if len(sys.argv) > 1 else "chain"
    rt.init(num_cpus=2)
    me = psutil.Process()

    @rt.remote
    def inc(x: int) -> int:
        return x + 1

    @rt.remote
    def noop() -> None:
        return None

    def chain(k: int) -> None:
        while k > LENGTH:
            chain(LENGTH)
            k -= LENGTH
        ref = inc.remote(0)
        for _ in range(k - 1):
            ref = inc.remote(ref)
        assert rt.get(ref) == k

    def fan(k: int) -> None:
        while k > 2000:
            fan(2000)
            k -= 2000
        rt.get([noop.remote() for _ in range(k)])

    run = chain if what == "chain" else fan
    run(50)
    run(N)
    samples = []
    for _ in range(REP):
        before = cpu_by_role(me)
        t = time.perf_counter()
        run(N)
        wall = time.perf_counter() - t
        per: dict[str, float] = {}
        for pid, (role, cpu) in cpu_by_role(me).items():
            per[role] = per.get(role, 0.0) + cpu - before.get(pid, (role, 0.0))[1]
        samples.append((N / wall, sum(per.values()) / N * 1e6,
                        {k: round(v / N * 1e6, 1) for k, v in per.items()}))
    rt.shutdown()
    samples.sort(key=lambda s: s[1])
    median = samples[len(samples) // 2]
    print(json.dumps({"what": what, "tasks_s": round(sorted(s[0] for s in samples)[REP // 2]),
                      "cpu_us_per_task": round(median[1], 1), "by_proc": median[2],
                      "all_cpu": [round(s[1], 1) for s in samples]}))


if __name__ == "__main__":
    main()
