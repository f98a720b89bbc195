"""CPU per call of the anchor's actor_async (one actor) and n_n_actor_async (two actors) in
each process: the driver, the actor workers, and the rest of the driver's descendants (node,
fork server). Run it with either checkout's python, alternating, on a quiet host:

    python actor_async_cpu.py CALLS REPS ACTORS      # e.g. 20000 2 1, then 10000 2 2

Each rep submits CALLS calls per actor at once (as the anchor does) and gets them all; one
JSON line per rep: calls/s, and CPU microseconds per call (user + system, psutil) of the
driver (drv_us), the actor workers together (wrk_us) and the others (oth_us). CPU times tick
at 10 ms: 20,000 calls resolve 0.5 us a call.
"""

import json
import os
import sys
import time

import psutil

import zmesh as ray

N = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
REPS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
NACT = int(sys.argv[3]) if len(sys.argv) > 3 else 1

ray.init(num_cpus=2)


@ray.remote
class Noop:
    def noop(self):
        return None

    def pid(self):
        return os.getpid()


acts = [Noop.remote() for _ in range(NACT)]
pids = ray.get([a.pid.remote() for a in acts])
ray.get([a.noop.remote() for a in acts for _ in range(500)])
me = psutil.Process()
wps = [psutil.Process(p) for p in pids]
others = [c for c in me.children(recursive=True) if c.pid not in pids]


def cpu(p):
    t = p.cpu_times()
    return t.user + t.system


for _ in range(REPS):
    d0, w0, o0 = cpu(me), [cpu(w) for w in wps], [cpu(o) for o in others]
    t = time.perf_counter()
    refs = [a.noop.remote() for _ in range(N) for a in acts]
    ray.get(refs)
    wall = time.perf_counter() - t
    calls = N * NACT
    d = cpu(me) - d0
    w = sum(cpu(x) for x in wps) - sum(w0)
    o = sum(cpu(x) for x in others) - sum(o0)
    print(json.dumps({"rate": round(calls / wall, 1), "drv_us": round(d / calls * 1e6, 1),
                      "wrk_us": round(w / calls * 1e6, 1), "oth_us": round(o / calls * 1e6, 1)}))
ray.shutdown()
