"""What authentication adds to ``zmesh.init(address=...)``: the Hello probe and CURVE.

``init(address=...)`` first says Hello to the node over a fresh CURVE connection
(`zmesh.security.probe`), so that a wrong token fails at once; its runtime connections then
each do a CURVE handshake of their own. This measures, against a one-node mesh of
`zmesh.testing.Cluster`, interleaved in one sitting:

- ``init``: a whole ``zmesh.init(address=...)`` (then ``shutdown``, not timed); a node on
  this machine named by host:port is reached over its ipc socket, so only the Hello probe
  goes over tcp;
- ``init tcp`` / ``init tcp insecure``: the same with an explicit tcp:// address, to a node
  of the CURVE mesh and to one started with ``--insecure`` (the A/B: every connection of the
  driver a CURVE one, or none);
- ``init ipc insecure``: host:port of the ``--insecure`` node (its ipc socket, plain Hello);
- ``probe``: the Hello probe alone (connect, CURVE + ZAP handshake, Hello, Welcome);
- ``curve connect`` / ``plain connect``: a new endpoint's first round trip to another in
  this process, with and without CURVE (two connections' handshakes: the request's and the
  reply's).

Target (issue 7): handshake plus authentication adds <= 20 ms to init.

    python benchmarks/bench_init_auth.py [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

import zmq

import zmesh
from zmesh.security.keys import INSECURE_ENV, TOKEN_ENV, ClusterCredentials
from zmesh.security.probe import handshake
from zmesh.testing import Cluster
from zmesh.transports import open_endpoint


def _first_round_trip(creds: ClusterCredentials | None) -> float:
    """Seconds from a new endpoint's first send to the echo of a server endpoint."""
    with open_endpoint("tcp://127.0.0.1:0", credentials=creds,
                       insecure=creds is None) as server, \
            open_endpoint("tcp://127.0.0.1:0", credentials=creds,
                          insecure=creds is None) as client:
        started = time.perf_counter()
        client.send(server.address, [b"ping"])
        got = server.recv(30)
        assert got is not None
        server.send(got[0], [b"pong"])
        assert client.recv(30) is not None
        return time.perf_counter() - started


def _insecure_node() -> tuple[subprocess.Popen[bytes], str, str]:
    """A node started with --insecure: (process, host:port, session dir)."""
    from zmesh.runtime.launcher import new_session_dir

    session_dir = new_session_dir()
    env = dict(os.environ, ZMESH_LAZY_IMPORT="1")
    env.pop(TOKEN_ENV, None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "zmesh.runtime.node.main", "--session-dir", session_dir,
         "--num-cpus", "1", "--insecure", "--parent-pid", str(os.getpid())],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()
    proc.stdout.close()
    if not line.startswith("ZMESH-NODE-READY"):
        proc.kill()
        raise SystemExit(f"the --insecure node failed to start: {line!r}")
    return proc, line.split()[3][len("tcp://"):], session_dir


def _init(address: str, token: str | None) -> float:
    """Seconds one init(address=...) takes; with token None, as a driver of an --insecure
    mesh (``$ZMESH_INSECURE=1``, as `zmesh node --insecure` sets for its processes)."""
    if token is None:
        os.environ[INSECURE_ENV] = "1"
    try:
        started = time.perf_counter()
        if token is None:
            zmesh.init(address=address)
        else:
            zmesh.init(address=address, token=token)
        took = time.perf_counter() - started
        zmesh.shutdown()
    finally:
        os.environ.pop(INSECURE_ENV, None)
    return took


def _ms(values: list[float]) -> str:
    ms = sorted(v * 1000 for v in values)
    return f"median {statistics.median(ms):6.1f} ms  [{ms[0]:.1f}-{ms[-1]:.1f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    creds = cluster.credentials
    address = f"tcp://{cluster.address}"
    times: dict[str, list[float]] = {"init": [], "init ipc insecure": [], "init tcp": [],
                                     "init tcp insecure": [], "probe": [],
                                     "curve connect": [], "plain connect": []}
    plain_proc, plain_address, plain_dir = _insecure_node()
    try:
        for _ in range(args.repeat):
            times["init"].append(_init(cluster.address, creds.token))
            times["init ipc insecure"].append(_init(plain_address, None))
            times["init tcp"].append(_init(f"tcp://{cluster.address}", creds.token))
            times["init tcp insecure"].append(_init(f"tcp://{plain_address}", None))
            started = time.perf_counter()
            handshake(address, creds, role="client")
            times["probe"].append(time.perf_counter() - started)
            times["curve connect"].append(_first_round_trip(creds))
            times["plain connect"].append(_first_round_trip(None))
    finally:
        cluster.shutdown()
        plain_proc.terminate()
        plain_proc.wait(30)
        shutil.rmtree(plain_dir, ignore_errors=True)
    print(f"{args.repeat} rounds, interleaved; zmq {zmq.zmq_version()}; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cpus")
    for name, values in times.items():
        print(f"  {name:<14} {_ms(values)}")
    for secure, plain in (("init", "init ipc insecure"), ("init tcp", "init tcp insecure")):
        diffs = [a - b for a, b in zip(times[secure], times[plain])]
        print(f"  {secure} - {plain} (pairwise): {_ms(diffs)}")
    added = [p + c - q for p, c, q in zip(times["probe"], times["curve connect"],
                                          times["plain connect"])]
    # "connect" makes two connections (the request's and the reply's), so this over-counts.
    print(f"  probe + (curve - plain connect): {_ms(added)}; target: authentication adds "
          "<= 20 ms to init (init as a whole is the line above)")

if __name__ == "__main__":
    main()
