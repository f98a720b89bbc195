"""Timeline of push at dispatch: stamps from driver, producer and consumer (one clock)."""
import os
import statistics
import sys
import time

import torch

import zmesh
from zmesh import _tl  # (the stamps module scripts/instrument.sh adds to a copy)

N = int(sys.argv[2]) if len(sys.argv) > 2 else 30
MB = float(sys.argv[1]) if len(sys.argv) > 1 else 1

@zmesh.remote
class Producer:
    @zmesh.method(tensor_transport="gloo")
    def make_kept(self, nbytes):
        return torch.ones(nbytes // 4, dtype=torch.float32)
    def stamps(self):
        out = list(_tl.STAMPS)
        _tl.STAMPS.clear()
        return out

@zmesh.remote
class Consumer:
    def stamp(self, value):
        _tl.s("C_method")
        return time.perf_counter()
    def stamps(self):
        out = list(_tl.STAMPS)
        _tl.STAMPS.clear()
        return out

zmesh.init(num_cpus=4)
prod, cons = Producer.remote(), Consumer.remote()
nbytes = int(MB * (1 << 20))
def run(n):
    refs = [prod.make_kept.remote(nbytes) for _ in range(n)]
    zmesh.wait(refs, num_returns=n)
    zmesh.get([prod.stamps.remote(), cons.stamps.remote()])
    _tl.STAMPS.clear()
    totals = []
    for ref in refs:
        _tl.s("D0")
        t0 = time.perf_counter()
        totals.append(zmesh.get(cons.stamp.remote(ref)) - t0)
        time.sleep(0.005)
    d = list(_tl.STAMPS)
    _tl.STAMPS.clear()
    pr, co = zmesh.get([prod.stamps.remote(), cons.stamps.remote()])
    return d, pr, co, totals
run(4)
print("load", os.getloadavg()[0], "push", os.environ.get("ZMESH_TENSOR_PUSH"), "MB", MB)
d, pr, co, totals = run(N)
allst = sorted([(t, lb) for lb, t in d] + [(t, lb) for lb, t in pr] + [(t, lb) for lb, t in co])
starts = [t for t, lb in allst if lb == "D0"]
per = {}
order = []
for i, t0 in enumerate(starts):
    end = starts[i + 1] if i + 1 < len(starts) else float("inf")
    seen = set()
    for t, lb in allst:
        if t0 <= t < end and lb not in seen:
            seen.add(lb)
            per.setdefault(lb, []).append((t - t0) * 1e6)
            if lb not in order:
                order.append(lb)
for lb in sorted(order, key=lambda x: statistics.median(per[x])):
    v = sorted(per[lb])
    print(f"{lb:12s} n={len(v):3d} p25 {v[len(v)//4]:8.0f} p50 {statistics.median(v):8.0f} p75 {v[3*len(v)//4]:8.0f} us")
print("total p50 ms", statistics.median(totals) * 1e3, "p10", sorted(totals)[len(totals)//10] * 1e3)
print("load", os.getloadavg()[0])
zmesh.shutdown()
