"""In one process: a sends one 100 B message to b, b receives it and answers, a receives: a
sync round trip between two endpoints of the loop kind (coalescing where the tree has it);
CPU seconds per round trip (this process: both ends and their libzmq I/O threads)."""
import os
import statistics
import time

from zmesh.transports import open_endpoint

kw = {}
try:
    from zmesh.transports import zmq_batch  # noqa: F401
    kw = {"coalesce": True}
except ImportError:
    pass
a = open_endpoint("tcp://127.0.0.1:0", **kw)
b = open_endpoint("tcp://127.0.0.1:0", **kw)
msg = [b"p" * 100]
def rt(n):
    for _ in range(n):
        a.send(b.address, msg)
        s, f = b.recv()
        b.send(s, f)
        a.recv()
rt(500)
res = []
for _ in range(5):
    c, w = time.process_time(), time.perf_counter()
    rt(3000)
    res.append(((time.process_time() - c) / 3000 * 1e6, 3000 / (time.perf_counter() - w)))
print(f"{'coalescing' if kw else 'base'}: cpu/rt median {statistics.median(r[0] for r in res):.1f} us, best {min(r[0] for r in res):.1f}; rt/s best {max(r[1] for r in res):,.0f}; load {os.getloadavg()[0]:.1f}")
a.close()
b.close()
