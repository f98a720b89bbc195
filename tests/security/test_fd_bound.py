"""A long-lived node holds a bounded number of fds however many peers come and go.

Before: one outbound DEALER per reply address ever seen, never closed, so ~1,000 distinct
addresses (strangers, or just drivers creating and killing actors) exhausted libzmq's 1,023
sockets and no driver could connect any more.
"""

from __future__ import annotations

import pytest
import zmq
from security_fixtures import fd_count

import zmesh
from zmesh.protocol import codec
from zmesh.protocol.messages import runtime as m
from zmesh.security.probe import handshake
from zmesh.testing import Cluster
from zmesh.transports.zmq_transport import DEFAULT_MAX_PEERS

FD_BOUND = 2 * DEFAULT_MAX_PEERS + 64
"""fds a node may hold above its idle count: two per kept outbound connection (its socket
and libzmq's mailbox), plus slack for inbound connections and workers."""


def test_a_thousand_reply_addresses_do_not_exhaust_the_nodes_sockets() -> None:
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1},
                      shutdown_at_exit=False)
    try:
        assert cluster.head_node is not None and cluster.address is not None
        target = f"tcp://{cluster.address}"
        handshake(target, cluster.credentials)
        pid = cluster.head_node.pid
        idle = fd_count(pid)
        creds = cluster.credentials
        ctx = zmq.Context()
        try:
            for port in range(1, 1001):  # a member asking as 1,000 different processes
                dealer = ctx.socket(zmq.DEALER)
                dealer.linger = 1000
                dealer.setsockopt(zmq.ROUTING_ID, f"tcp://127.0.0.1:{port}".encode())
                dealer.curve_publickey = creds.curve_public
                dealer.curve_secretkey = creds.curve_secret
                dealer.curve_serverkey = creds.curve_public
                dealer.connect(target)
                dealer.send(codec.encode(m.Query(request_id=port, what="nodes")))
                dealer.close()
        finally:
            ctx.term()
        handshake(target, cluster.credentials)  # every query above has been answered
        peak = fd_count(pid)
        assert peak <= idle + FD_BOUND, (idle, peak)
        zmesh.init(address=cluster.address)  # a driver still gets in
        try:
            assert zmesh.get(echo.remote(5), timeout=60) == 5
        finally:
            zmesh.shutdown()
        print("fds idle", idle, "after 1,000 reply addresses", peak)
    finally:
        cluster.shutdown()


@zmesh.remote
def echo(x: int) -> int:
    return x


def _churn_actors(total: int, batch: int) -> list[int]:
    """Create and kill `total` actors in batches from one driver; the node's fds after each."""
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2},
                      shutdown_at_exit=False)
    @zmesh.remote(num_cpus=0)
    class Tiny:  # defined here so that it travels by value, not by module name
        def ping(self) -> int:
            return 1

    counts = []
    try:
        assert cluster.head_node is not None
        pid = cluster.head_node.pid
        zmesh.init(address=cluster.address)
        for _ in range(total // batch):
            actors = [Tiny.remote() for _ in range(batch)]
            assert zmesh.get([a.ping.remote() for a in actors], timeout=120) == [1] * batch
            for a in actors:
                zmesh.kill(a)
            counts.append(fd_count(pid))
        zmesh.shutdown()
    finally:
        cluster.shutdown()
    return counts


def test_creating_and_killing_actors_keeps_the_nodes_fds_bounded() -> None:
    counts = _churn_actors(100, 20)
    assert max(counts) <= counts[0] + FD_BOUND, counts


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_thousand_actors_created_and_killed_keep_the_nodes_fds_bounded() -> None:
    counts = _churn_actors(1000, 25)
    assert max(counts) <= counts[0] + FD_BOUND, counts
    print("fds after each batch of 25 actors", counts)
