"""1 GiB pulls over CURVE between two Cluster nodes (same-host copies off), optionally under
CPU load; prints, per round, the time of the driver's get and the membership events each
node has counted. Run from the checkout to test (the nodes import zmesh from the cwd):

    python benchmarks/results/stop22/liveness_pull_repro.py [MiB=1024] [rounds=2] [hogs=0]
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from typing import Any

sys.path.insert(0, os.getcwd())
os.environ["ZMESH_LOCAL_COPY"] = "0"

import numpy as np  # noqa: E402

import zmesh  # noqa: E402
from zmesh.testing import Cluster  # noqa: E402
from zmesh.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: E402

MiB = 1 << 20


@zmesh.remote
def make(nbytes: int) -> Any:
    a = np.empty(nbytes, dtype=np.uint8)
    a[:] = 5
    return a


def main() -> None:
    size = int(sys.argv[1]) * MiB if len(sys.argv) > 1 else 1024 * MiB
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    hogs = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(hogs)]
    store = 2 * size + 256 * MiB
    c = Cluster(initialize_head=True,
                head_node_args={"num_cpus": 1, "object_store_memory": store})
    try:
        far = c.add_node(num_cpus=1, resources={"far": 1}, object_store_memory=store)
        head = c.head_node
        assert head is not None
        zmesh.init(address=c.address)
        on_far = NodeAffinitySchedulingStrategy(node_id=far.node_id, soft=False)
        for r in range(rounds):
            ref = make.options(scheduling_strategy=on_far).remote(size)
            zmesh.wait([ref], timeout=300, fetch_local=False)
            t0 = time.perf_counter()
            try:
                ok: object = zmesh.get(ref, timeout=300).nbytes == size
            except Exception as exc:  # the point: say what failed
                ok = f"{type(exc).__name__}: {str(exc)[:200]}"
            t1 = time.perf_counter()
            events = {name: c.query(node, "metrics")["membership_events"]
                      for name, node in (("head", head), ("far", far))}
            print(json.dumps({"round": r, "s": round(t1 - t0, 2), "ok": ok,
                              "load": os.getloadavg()[0], "events": events}), flush=True)
            ref = None
    finally:
        for p in procs:
            p.kill()
        with contextlib.suppress(Exception):
            zmesh.shutdown()
        c.shutdown()


if __name__ == "__main__":
    main()
