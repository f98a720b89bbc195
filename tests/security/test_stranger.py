"""The attack of issue 7: a local stranger without the join token reaches a node's tcp port.

It must not run code (the marker file never appears), stop the node, cut its links, lease
its workers or read its objects; the node stays up and a driver with the token still works.
The same CreateActor sent by a member does run (the control that proves the payload is real).
"""

from __future__ import annotations

import os
import subprocess
import sys

import zmq
from security_fixtures import (
    attack_messages,
    create_actor_with_pickle,
    encode,
    raw_zmtp_null_dealer,
    receiving,
    wait_until,
)

import zmesh
from zmesh.security.keys import ClusterCredentials
from zmesh.testing import Cluster
from zmesh.transports import open_endpoint


@zmesh.remote
def add(a: int, b: int) -> int:
    return a + b


def _stranger_sends_everything(address: str, marker: str) -> None:
    host, port = address.rsplit(":", 1)
    target = f"tcp://{address}"
    messages = [encode(msg) for msg in attack_messages(marker, "tcp://127.0.0.1:1")]
    # 1. A zmesh process of another mesh (a wrong token): its handshake fails.
    with open_endpoint("tcp://127.0.0.1:0", credentials=ClusterCredentials.generate()) as other:
        for frame in messages:
            other.send(target, [frame])
    # 2. A plain pyzmq DEALER (no CURVE), with a routing id that is not UTF-8.
    ctx = zmq.Context()
    try:
        for ident in (b"\xff\xfe\x00bad", b"tcp://127.0.0.1:1"):
            dealer = ctx.socket(zmq.DEALER)
            dealer.setsockopt(zmq.ROUTING_ID, ident)
            dealer.linger = 500
            dealer.connect(target)
            for frame in messages:
                dealer.send(frame)
            dealer.close()
        # 3. A CURVE client that guesses the server key (a random one).
        dealer = ctx.socket(zmq.DEALER)
        public, secret = zmq.curve_keypair()
        dealer.curve_publickey, dealer.curve_secretkey = public, secret
        dealer.curve_serverkey = zmq.curve_keypair()[0]
        dealer.linger = 500
        dealer.connect(target)
        for frame in messages:
            dealer.send(frame)
        dealer.close()
    finally:
        ctx.term()
    # 4. The standard library only: ZMTP with the NULL mechanism, in another process.
    code = ("import sys; sys.path[:0] = [sys.argv[1]]; import security_fixtures as f, pickle; "
            "f.raw_zmtp_null_dealer(sys.argv[2], int(sys.argv[3]), b'tcp://127.0.0.1:1', "
            "pickle.loads(bytes.fromhex(sys.argv[4])))")
    import pickle

    subprocess.run([sys.executable, "-c", code, os.path.dirname(__file__), host, port,
                    pickle.dumps(messages).hex()], check=True, timeout=60)
    raw_zmtp_null_dealer(host, int(port), b"\x00\xff", messages)  # and in this process


def test_a_stranger_runs_no_code_and_stops_nothing(mesh: Cluster, tmp_path: object) -> None:
    marker = os.path.join(str(tmp_path), "pwned")
    _stranger_sends_everything(mesh.address, marker)
    zmesh.init(address=mesh.address)  # finds the token of a node of this machine's user
    try:
        assert zmesh.get(add.remote(1, 2), timeout=60) == 3
    finally:
        zmesh.shutdown()
    assert mesh.head_node is not None and mesh.head_node.alive()
    assert not os.path.exists(marker), "a stranger's pickle was loaded"
    assert [row["Alive"] for row in mesh.query(mesh.head_node, "nodes")] == [True]


def test_the_same_payload_from_a_member_does_run(tmp_path: object) -> None:
    """The control: with the cluster's credentials the CreateActor above is loaded, so the
    stranger test would fail if authentication let it through."""
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1},
                      shutdown_at_exit=False)
    try:
        marker = os.path.join(str(tmp_path), "member-ran")
        with open_endpoint("tcp://127.0.0.1:0", credentials=cluster.credentials) as member:
            member.send(f"tcp://{cluster.address}",
                        [encode(create_actor_with_pickle(marker, member.address))])
            wait_until(receiving(member, lambda: os.path.exists(marker)), 60,
                       "the member's CreateActor to load")
    finally:
        cluster.shutdown()
