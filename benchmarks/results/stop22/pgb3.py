"""Placement groups created, made ready and removed per second, with each process's CPU per
group (user + system from /proc via psutil), after the node has settled: python pgb3.py LABEL"""

import resource
import sys
import time

import psutil

import zmesh as rt
from zmesh.util import placement_group, remove_placement_group

rt.init(num_cpus=2)
me = psutil.Process()


def cpus() -> dict:
    found = {}
    for kid in me.children(recursive=True):
        try:
            label = f"pid {kid.pid} ppid {kid.ppid()} threads {kid.num_threads()}"
            found[(kid.pid, label)] = sum(kid.cpu_times()[:2])
        except psutil.Error:
            pass
    usage = resource.getrusage(resource.RUSAGE_SELF)
    found[(me.pid, "driver")] = usage.ru_utime + usage.ru_stime
    return found


def one() -> None:
    pg = placement_group([{"CPU": 1}])
    rt.get(pg.ready())
    remove_placement_group(pg)


for _ in range(20):
    one()
time.sleep(1.5)  # the fork server's background imports after init() end (not a sync point)
n = 1000
c0 = cpus()
t0 = time.perf_counter()
for _ in range(n):
    one()
t1 = time.perf_counter()
c1 = cpus()
print(f"{sys.argv[1]:6} {n / (t1 - t0):7.0f} pgs/s")
for key, value in c1.items():
    print("   ", key[1], f"{1e6 * (value - c0.get(key, 0)) / n:6.0f} us/pg")
rt.shutdown()
