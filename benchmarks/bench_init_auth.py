"""What authentication adds to ``zmesh.init(address=...)``: the Hello probe and CURVE.

``init(address=...)`` first says Hello to the node over a fresh CURVE connection
(`zmesh.security.probe`), so that a wrong token fails at once; its runtime connections then
each do a CURVE handshake of their own. This measures, against a one-node mesh of
`zmesh.testing.Cluster`, interleaved in one sitting:

- ``init``: a whole ``zmesh.init(address=...)`` (then ``shutdown``, not timed);
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
import statistics
import time

import zmq

import zmesh
from zmesh.security.keys import ClusterCredentials
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
    times: dict[str, list[float]] = {"init": [], "probe": [], "curve connect": [],
                                     "plain connect": []}
    try:
        for _ in range(args.repeat):
            started = time.perf_counter()
            zmesh.init(address=cluster.address, token=creds.token)
            times["init"].append(time.perf_counter() - started)
            zmesh.shutdown()
            started = time.perf_counter()
            handshake(address, creds, role="client")
            times["probe"].append(time.perf_counter() - started)
            times["curve connect"].append(_first_round_trip(creds))
            times["plain connect"].append(_first_round_trip(None))
    finally:
        cluster.shutdown()
    print(f"{args.repeat} rounds, interleaved; zmq {zmq.zmq_version()}; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cpus")
    for name, values in times.items():
        print(f"  {name:<14} {_ms(values)}")
    added = [p + c - q for p, c, q in zip(times["probe"], times["curve connect"],
                                          times["plain connect"])]
    # "connect" makes two connections (the request's and the reply's), so this over-counts.
    print(f"  probe + (curve - plain connect): {_ms(added)}; target: authentication adds "
          "<= 20 ms to init (init as a whole is the line above)")

if __name__ == "__main__":
    main()
