"""CPU per pipelined message (client + server process, all threads), zmesh CURVE vs plain."""
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.getcwd(), "benchmarks"))
import bench_transports as bt
import zmq

from zmesh.security import keys

creds = keys.ClusterCredentials.generate()
os.environ[keys.TOKEN_ENV] = creds.token
keys.install(creds)
os.environ[bt.RAW_CURVE_ENV] = b" ".join(zmq.curve_keypair()).decode()
total = int(sys.argv[1]) if len(sys.argv) > 1 else 30000
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
res = {}
servers, clients = {}, {}
for impl in ("zmesh", "zmesh-plain"):
    address = f"tcp://127.0.0.1:{bt.free_port()}"
    servers[impl] = bt.start_server(impl, address)
    clients[impl] = bt.IMPLS[impl](address, "tcp://127.0.0.1:0")
    bt.round_trips(clients[impl], 0.05)
    res[impl] = {"rate": [], "cpu_us": [], "rt": [], "rt_cpu_us": []}
streamed = 0
for _ in range(rounds):
    for impl, c in clients.items():
        pid = servers[impl].pid
        a, b = bt._cpu_seconds(), bt._cpu_seconds(pid)
        rate = bt.pipelined(c, total, streamed)
        used = bt._cpu_seconds() - a + bt._cpu_seconds(pid) - b
        res[impl]["rate"].append(rate)
        res[impl]["cpu_us"].append(used / total * 1e6)
        a, b = bt._cpu_seconds(), bt._cpu_seconds(pid)
        import time
        t = time.perf_counter()
        rt = bt.round_trips(c, 0.3)
        n = rt * (time.perf_counter() - t)
        res[impl]["rt"].append(rt)
        res[impl]["rt_cpu_us"].append((bt._cpu_seconds() - a + bt._cpu_seconds(pid) - b) / n * 1e6)
    streamed += total
for c in clients.values():
    c.close()
for s in servers.values():
    s.wait(10)
med = statistics.median
print(f"coalesce={os.environ.get('ZMESH_COALESCE', '1')} load={os.getloadavg()[0]:.1f}")
for impl, r in res.items():
    print(f"  {impl:<12} pipelined best {max(r['rate']):>9,.0f}/s  cpu {med(r['cpu_us']):.2f} us/msg (both ends) | sync best {max(r['rt']):>7,.0f}/s cpu {med(r['rt_cpu_us']):.1f} us/rt")
z, p = res["zmesh"], res["zmesh-plain"]
print(f"  CURVE/plain: pipelined rate ratio (median per round) {med([a/b for a,b in zip(z['rate'],p['rate'])]):.2f}; cpu/msg plain/CURVE {med(p['cpu_us'])/med(z['cpu_us']):.2f}; sync ratio {med([a/b for a,b in zip(z['rt'],p['rt'])]):.2f}")
