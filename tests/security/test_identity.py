"""No member of a mesh can speak for another process (issue 7).

Every process authenticates with a CURVE key pair of its own, vouched for by the mesh secret,
and a receiving ROUTER binds each sender name to the first key that claimed it. A second
authenticated process that claims another's name is refused (and counted), and the real
process keeps working. The controls show that the same forged connection is accepted under
its own name, so the refusals are not a connection that failed for another reason.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest
import zmq
from security_fixtures import AnsweringMember, drain_until, member_dealer, wait_until

import zmesh
from zmesh.protocol.handshake import PROTOCOL_VERSION
from zmesh.runtime import context
from zmesh.security.keys import ClusterCredentials
from zmesh.testing import Cluster
from zmesh.transports import open_endpoint
from zmesh.transports.zmq_transport import ZmqEndpoint


def test_a_member_claiming_another_process_name_is_refused_and_the_real_one_still_works(
        creds: ClusterCredentials, ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
    with open_endpoint("tcp://127.0.0.1:0", credentials=creds) as server, \
            open_endpoint("tcp://127.0.0.1:0", credentials=creds) as victim:
        assert isinstance(server, ZmqEndpoint)
        victim.send(server.address, [b"real-1"])
        assert server.recv(60) == (victim.address, [b"real-1"])
        forger = member_dealer(ctx, creds, server.address, sender=victim.address)
        forger.send(b"forged")
        got = drain_until(server, lambda: server.peers.refused_spoof >= 1,
                          "the forged claim to be refused")
        assert got == []
        victim.send(server.address, [b"real-2"])
        assert server.recv(60) == (victim.address, [b"real-2"])
        forger.send(b"forged again")  # the forger's connection stays refused
        # Control: the same kind of connection, under a name of its own (an address where
        # it answers for its key), is accepted.
        own = AnsweringMember(ctx, creds)
        try:
            honest = member_dealer(ctx, creds, server.address, sender=own.address,
                                   keypair=own.keypair)
            honest.send(b"own name")
            got = drain_until(server, lambda: server.peers.refused_spoof >= 2,
                              "the forger's second message to be refused")
            if not got:  # (it waits for the answer to the server's challenge)
                got = drain_until(server, lambda: server.peers.sizes()["owners"] >= 1
                                  and not server.peers.proofs.busy, "the honest message")
            assert got == [(own.address, [b"own name"])]
        finally:
            own.close()


def test_a_name_whose_holder_is_gone_passes_to_a_new_process(
        creds: ClusterCredentials, ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
    """A port reused by a new process after the old one exited must not lock it out: the
    new process receives there, so it answers for its key and takes the name."""
    with open_endpoint("tcp://127.0.0.1:0", credentials=creds) as server:
        assert isinstance(server, ZmqEndpoint)
        old = open_endpoint("tcp://127.0.0.1:0", credentials=creds)
        name = old.address
        old.send(server.address, [b"old"])
        assert server.recv(60) == (name, [b"old"])
        old.close()
        new = AnsweringMember(ctx, creds, port=int(name.rsplit(":", 1)[1]))
        try:
            successor = member_dealer(ctx, creds, server.address, sender=name,
                                      keypair=new.keypair)
            successor.send(b"new")
            assert drain_until(server, lambda: server.peers.sizes()["connections"] >= 1,
                               "the successor's message") == [(name, [b"new"])]
            assert new.answered >= 1
        finally:
            new.close()


def test_a_key_without_this_mesh_vouch_is_refused(
        creds: ClusterCredentials, ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
    with open_endpoint("tcp://127.0.0.1:0", credentials=creds) as server:
        assert isinstance(server, ZmqEndpoint)
        forger = member_dealer(ctx, creds, server.address, sender="tcp://127.0.0.1:9",
                               vouched=False)
        forger.send(b"unvouched")
        got = drain_until(server, lambda: server.peers.refused_unvouched >= 1,
                          "the unvouched key to be refused")
        assert got == []


def test_a_peer_of_another_protocol_version_is_refused_with_a_clear_warning(
        creds: ClusterCredentials, ctx: zmq.Context[zmq.Socket[bytes]],
        caplog: pytest.LogCaptureFixture) -> None:
    with open_endpoint("tcp://127.0.0.1:0", credentials=creds) as server:
        assert isinstance(server, ZmqEndpoint)
        caplog.set_level(logging.WARNING, logger="zmesh.transports.peers")
        future = member_dealer(ctx, creds, server.address, sender="tcp://127.0.0.1:9",
                               proto="999")
        future.send(b"from the future")
        got = drain_until(server, lambda: server.peers.refused_version >= 1,
                          "the other version to be refused")
        assert got == []
        assert f"wire protocol 999, this process speaks {PROTOCOL_VERSION}" in caplog.text


_ATTACKER = """
import os, sys, time
sys.path[:0] = [sys.argv[1]]
import zmq
import security_fixtures as f
from zmesh.security.keys import ClusterCredentials
creds = ClusterCredentials.from_token(os.environ["ZMESH_TOKEN"])
node, driver, spoofed_marker, own_marker = sys.argv[2:6]
ctx = zmq.Context()
forged = f.member_dealer(ctx, creds, node, sender=driver)
forged.send(f.encode(f.create_actor_with_pickle(spoofed_marker, driver)))
own = f.AnsweringMember(ctx, creds)  # the attacker's own name: it answers there
honest = f.member_dealer(ctx, creds, node, sender=own.address, keypair=own.keypair)
honest.send(f.encode(f.create_actor_with_pickle(own_marker, own.address)))
f.wait_until(lambda: os.path.exists(own_marker), 60, "the attacker's own CreateActor to load")
own.close()
ctx.destroy(linger=0)
"""


def test_a_second_process_with_the_token_cannot_act_as_the_driver(
        mesh: Cluster, tmp_path: object) -> None:
    zmesh.init(address=mesh.address)
    try:
        driver = context.current_client().address
        assert zmesh.get(zmesh.put(1), timeout=60) == 1
        spoofed = os.path.join(str(tmp_path), "spoofed-ran")
        own = os.path.join(str(tmp_path), "own-ran")
        node = f"tcp://{mesh.address}"
        env = dict(os.environ, ZMESH_TOKEN=mesh.credentials.token)
        subprocess.run([sys.executable, "-c", _ATTACKER, os.path.dirname(__file__), node,
                        driver, spoofed, own], env=env, check=True, timeout=120)
        assert mesh.head_node is not None

        def refused() -> bool:
            metrics = mesh.query(mesh.head_node, "metrics")
            return int(metrics["refused_connections"].get("spoof", 0)) >= 1

        wait_until(refused, 60, "the node to refuse the claim to the driver's name")
        # Control: the same payload under the attacker's own name is loaded.
        wait_until(lambda: os.path.exists(own), 60, "the attacker's own CreateActor to load")
        assert not os.path.exists(spoofed), "a message claiming the driver's name was handled"
        assert zmesh.get(zmesh.put(2), timeout=60) == 2
    finally:
        zmesh.shutdown()
