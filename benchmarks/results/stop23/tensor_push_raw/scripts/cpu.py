"""CPU and context switches per call of consumer.stamp.remote(fresh tensor-transport ref):
driver, producer, consumer (all threads, /proc), and wall p50; sizes in MB from argv."""
import glob
import os
import statistics
import sys
import time

import torch

import zmesh


@zmesh.remote
class Producer:
    @zmesh.method(tensor_transport="gloo")
    def make_kept(self, nbytes):
        return torch.ones(nbytes // 4, dtype=torch.float32)
    def pid(self):
        return os.getpid()

@zmesh.remote
class Consumer:
    def stamp(self, value):
        return time.perf_counter()
    def pid(self):
        return os.getpid()

def stats(pid):
    tick = os.sysconf("SC_CLK_TCK")
    with open(f"/proc/{pid}/stat") as stat:
        f = stat.read().rsplit(")", 1)[1].split()
    cpu = (int(f[11]) + int(f[12])) / tick
    cs = 0
    for st in glob.glob(f"/proc/{pid}/task/*/status"):
        try:
            with open(st) as status:
                for line in status:
                    if line.startswith(("voluntary_ctxt", "nonvoluntary_ctxt")):
                        cs += int(line.split()[1])
        except OSError:
            pass
    return cpu, cs

zmesh.init(num_cpus=4)
prod, cons = Producer.remote(), Consumer.remote()
pids = {"driver": os.getpid(), "producer": zmesh.get(prod.pid.remote()), "consumer": zmesh.get(cons.pid.remote())}
N = int(os.environ.get("N", "300"))
for mb in [float(x) for x in sys.argv[1:]]:
    nbytes = int(mb * (1 << 20))
    for _ in range(2):  # warm: the pair, the pool
        zmesh.get(cons.stamp.remote(prod.make_kept.remote(nbytes)))
    refs = [prod.make_kept.remote(nbytes) for _ in range(N)]
    zmesh.wait(refs, num_returns=N)
    before = {k: stats(p) for k, p in pids.items()}
    times = []
    for ref in refs:
        t0 = time.perf_counter()
        times.append(zmesh.get(cons.stamp.remote(ref)) - t0)
    after = {k: stats(p) for k, p in pids.items()}
    del refs
    cpu = {k: (after[k][0] - before[k][0]) / N * 1e6 for k in pids}
    cs = {k: (after[k][1] - before[k][1]) / N for k in pids}
    print(f"{mb:5.0f} MB | CPU us/call driver {cpu['driver']:6.0f} producer {cpu['producer']:6.0f} "
          f"consumer {cpu['consumer']:6.0f} sum {sum(cpu.values()):6.0f} | ctx sw/call driver {cs['driver']:5.1f} "
          f"producer {cs['producer']:5.1f} consumer {cs['consumer']:5.1f} sum {sum(cs.values()):5.1f} | "
          f"wall p10/p50 ms {sorted(times)[N//10]*1e3:.2f} {statistics.median(times)*1e3:.2f} | load {os.getloadavg()[0]:.1f}", flush=True)
zmesh.shutdown()
