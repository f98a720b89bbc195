"""A driver on one "machine" using a node on another: the README's multi-machine flow, with
each side in its own network namespace joined by a veth pair (nothing leaves this machine).

A process is named by the address it receives at, and a node first asks at that address
who receives there (proof of address). A driver that bound 127.0.0.1 was asked on the
node's own loopback, so nothing it sent was delivered. Needs root and `ip netns`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest
from test_netns_membership import (  # (the namespaces' fixtures and helpers)
    SUBNET,
    NsNode,
    Wire,
    _netns_usable,
    start_node,
    stop_node,
    wire,  # noqa: F401  (a fixture)
)

pytestmark = pytest.mark.skipif(bool(_netns_usable()), reason=_netns_usable() or "usable")

DRIVER = textwrap.dedent("""
    import sys
    import zmesh

    zmesh.init(address=sys.argv[1])

    @zmesh.remote
    def where():
        return zmesh.get_runtime_context().get_node_id()

    @zmesh.remote
    class Counter:
        def __init__(self):
            self.n = 0

        def add(self, k):
            self.n += k
            return self.n

    c = Counter.remote()
    print("node", zmesh.get(where.remote(), timeout=60), flush=True)
    print("count", zmesh.get([c.add.remote(1), c.add.remote(2)], timeout=60), flush=True)
    zmesh.shutdown()
""")


@pytest.fixture(params=["address", "0.0.0.0"])
def far_node(request: pytest.FixtureRequest,
             wire: Wire) -> Iterator[NsNode]:  # noqa: F811  (the imported fixture)
    # --host 0.0.0.0: the node binds and is named by this namespace's own address instead
    # (0.0.0.0 cannot be reached or proven from another machine)
    host = SUBNET.format(wire.net, 1) if request.param == "address" else "0.0.0.0"
    node = start_node(wire.a, host)
    assert node.address.startswith(f"tcp://{SUBNET.format(wire.net, 1)}:"), node.address
    try:
        yield node
    finally:
        stop_node(node)


def test_a_driver_in_another_namespace_runs_tasks_and_actors_on_the_node(
        far_node: NsNode, wire: Wire) -> None:  # noqa: F811
    env = {k: v for k, v in os.environ.items() if k != "ZMESH_CLIENT_BIND"}
    proc = subprocess.run(
        ["ip", "netns", "exec", wire.b, sys.executable, "-c", DRIVER, far_node.address],
        capture_output=True, text=True, timeout=150, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"node {far_node.node_id}" in proc.stdout, proc.stdout + proc.stderr[-2000:]
    assert "count [1, 3]" in proc.stdout, proc.stdout + proc.stderr[-2000:]
