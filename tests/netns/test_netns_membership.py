"""Nodes with their own addresses in network namespaces, joined by a veth pair.

Each node runs inside its namespace (`ip netns exec`) on its own 10.x address; the test
reads their state over their ipc sockets (filesystem, not network). Cutting the link makes
each side declare the other dead; healing it brings them back together. Needs root and
`ip netns`; skipped otherwise. Nothing leaves this machine: the veth pair is its own wire.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from runtime_fixtures import wait_until

from zmesh.runtime.launcher import session_root
from zmesh.runtime.node.query import NodeQuerier
from zmesh.store.sweep import default_store_root

SUBNET = "10.231.{}.{}"


def _ip(*args: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    cmd = ["ip", *args] if ns is None else ["ip", "netns", "exec", ns, "ip", *args]
    return subprocess.run(cmd, capture_output=True, text=True, check=check, timeout=10)


def _netns_usable() -> str:
    if os.geteuid() != 0:
        return "needs root for ip netns"
    if shutil.which("ip") is None:
        return "needs the ip command (iproute2)"
    probe = f"zmprobe{os.getpid()}"
    if _ip("netns", "add", probe, check=False).returncode != 0:
        return "ip netns add failed (no CAP_SYS_ADMIN here?)"
    _ip("netns", "del", probe, check=False)
    return ""


pytestmark = pytest.mark.skipif(bool(_netns_usable()), reason=_netns_usable() or "usable")


@dataclass
class NsNode:
    ns: str
    host: str
    node_id: str
    address: str  # tcp://host:port
    ipc: str
    session_dir: str
    proc: subprocess.Popen[bytes]


@dataclass
class Wire:
    """Two namespaces joined by a veth pair (a side, b side)."""

    a: str
    b: str
    veth_a: str
    veth_b: str
    net: int


@pytest.fixture
def wire() -> Iterator[Wire]:
    tag = f"{os.getpid() % 10000}"
    net = os.getpid() % 200 + 20
    w = Wire(f"zma{tag}", f"zmb{tag}", f"zva{tag}", f"zvb{tag}", net)
    try:
        _ip("netns", "add", w.a)
        _ip("netns", "add", w.b)
        _ip("link", "add", w.veth_a, "netns", w.a, "type", "veth", "peer", "name", w.veth_b,
            "netns", w.b)
        for ns, dev, host in ((w.a, w.veth_a, 1), (w.b, w.veth_b, 2)):
            _ip("addr", "add", SUBNET.format(net, host) + "/24", "dev", dev, ns=ns)
            _ip("link", "set", dev, "up", ns=ns)
            _ip("link", "set", "lo", "up", ns=ns)
        yield w
    finally:
        for ns in (w.a, w.b):  # deleting a namespace deletes its end of the pair too
            _ip("netns", "del", ns, check=False)


@pytest.fixture
def querier() -> Iterator[NodeQuerier]:
    d = tempfile.mkdtemp(prefix="zmq-", dir=session_root())
    q = NodeQuerier(bind=f"ipc://{d}/querier.sock")  # answers must reach us from any netns
    try:
        yield q
    finally:
        q.close()
        shutil.rmtree(d, ignore_errors=True)


def start_node(ns: str, host: str, join: str | None = None) -> NsNode:
    session_dir = tempfile.mkdtemp(prefix="session-", dir=session_root())
    cmd = ["ip", "netns", "exec", ns, sys.executable, "-m", "zmesh.runtime.node.main",
           "--session-dir", session_dir, "--num-cpus", "1", "--host", host,
           "--object-store-memory", str(64 << 20), "--parent-pid", str(os.getpid())]
    if join:
        cmd += ["--join", join]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()
    proc.stdout.close()
    if not line.startswith("ZMESH-NODE-READY"):
        proc.kill()
        proc.wait()
        shutil.rmtree(session_dir, ignore_errors=True)
        raise RuntimeError(f"node in {ns} failed to start: {line!r}")
    _, ipc, node_id, tcp = line.split()
    return NsNode(ns, host, node_id, tcp, ipc, session_dir, proc)


def stop_node(node: NsNode) -> None:
    node.proc.terminate()
    try:
        node.proc.wait(15)
    except subprocess.TimeoutExpired:
        node.proc.kill()
        node.proc.wait()
    shutil.rmtree(node.session_dir, ignore_errors=True)
    shutil.rmtree(os.path.join(default_store_root(), node.node_id), ignore_errors=True)


def states(q: NodeQuerier, node: NsNode) -> dict[str, str]:
    """node id -> state ('alive', 'suspect', 'dead', 'left') as `node` sees the mesh."""
    return {r["NodeID"]: r["State"] for r in q.query(node.ipc, "nodes", timeout=5)}


@pytest.fixture
def pair(wire: Wire) -> Iterator[tuple[NsNode, NsNode]]:
    a = start_node(wire.a, SUBNET.format(wire.net, 1))
    try:
        b = start_node(wire.b, SUBNET.format(wire.net, 2), join=a.address[len("tcp://"):])
    except BaseException:
        stop_node(a)
        raise
    try:
        yield a, b
    finally:
        stop_node(b)
        stop_node(a)


def test_nodes_in_two_namespaces_join_over_their_own_addresses(
        pair: tuple[NsNode, NsNode], querier: NodeQuerier) -> None:
    a, b = pair
    assert a.address.startswith("tcp://10.231.") and b.address.startswith("tcp://10.231.")
    assert wait_until(lambda: states(querier, a).get(b.node_id) == "alive" and
                      states(querier, b).get(a.node_id) == "alive", timeout=15)


def test_a_cut_link_makes_each_side_declare_the_other_dead_and_a_heal_rejoins(
        pair: tuple[NsNode, NsNode], wire: Wire, querier: NodeQuerier) -> None:
    a, b = pair
    assert wait_until(lambda: states(querier, a).get(b.node_id) == "alive" and
                      states(querier, b).get(a.node_id) == "alive", timeout=15)
    _ip("link", "set", wire.veth_a, "down", ns=wire.a)
    assert wait_until(lambda: states(querier, a).get(b.node_id) == "dead", timeout=15)
    assert wait_until(lambda: states(querier, b).get(a.node_id) == "dead", timeout=15)
    _ip("link", "set", wire.veth_a, "up", ns=wire.a)
    assert wait_until(lambda: states(querier, a).get(b.node_id) == "alive" and
                      states(querier, b).get(a.node_id) == "alive", timeout=30)
