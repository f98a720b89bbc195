"""Proof of address applies to every message of a batch (`transports.zmq_batch`).

A batch is one ZeroMQ message standing for several: from a sender whose address is not yet
proven it is held whole, then delivered message by message in order, or refused whole, and
the held and refusal counters count its messages, not its frame.
"""

from __future__ import annotations

import struct
import threading
import time

import pytest
import zmq
from security_fixtures import AnsweringMember, drain_until, member_dealer, wait_until

from zmesh.security.keys import ClusterCredentials
from zmesh.transports import open_endpoint
from zmesh.transports import zmq_batch as zb
from zmesh.transports.zmq_transport import ZmqEndpoint


def _receive(server: ZmqEndpoint, n: int) -> list[tuple[str, list[bytes]]]:
    got: list[tuple[str, list[bytes]]] = []
    deadline = time.monotonic() + 60
    while len(got) < n:
        assert time.monotonic() < deadline, f"only {len(got)} of {n} messages came: {got}"
        item = server.recv(0.1)
        if item is not None:
            got.append((item[0], [bytes(f) for f in item[1]]))
    return got


def _envelope(messages: list[bytes]) -> list[bytes]:
    return [b"", zb.pack(messages, [len(m) for m in messages])]


def test_a_batch_from_a_sender_being_proven_is_held_then_delivered_in_order(
        creds: ClusterCredentials, ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
    member = AnsweringMember(ctx, creds)
    try:
        with open_endpoint("tcp://127.0.0.1:0", credentials=creds) as server:
            assert isinstance(server, ZmqEndpoint)
            dealer = member_dealer(ctx, creds, server.address, sender=member.address,
                                   keypair=member.keypair)
            dealer.send_multipart(_envelope([b"m%d" % i for i in range(5)]))
            dealer.send(b"m5")
            dealer.send_multipart(_envelope([b"m6", b"m7"]))
            seen = _receive(server, 8)
            assert seen == [(member.address, [b"m%d" % i]) for i in range(8)]
            assert member.answered == 1 and server.peers.counts()["unproven"] == 0
    finally:
        member.close()


@pytest.mark.parametrize("answer", ["none", "another key"])
def test_a_batch_from_an_unproven_sender_is_refused_whole_and_counted_per_message(
        creds: ClusterCredentials, ctx: zmq.Context[zmq.Socket[bytes]], answer: str) -> None:
    from zmesh.transports.zmq_proof import answer_frame

    other = zmq.curve_keypair()[0]
    keypair = zmq.curve_keypair()
    member = None
    if answer == "none":  # an address nobody receives at
        with open_endpoint("tcp://127.0.0.1:0", credentials=creds) as gone:
            name = gone.address
    else:  # the address answers for another key: the claim is a spoof
        member = AnsweringMember(ctx, creds, keypair=keypair,
                                 reply=lambda nonce: [answer_frame(nonce, other)])
        name = member.address
    try:
        with open_endpoint("tcp://127.0.0.1:0", credentials=creds,
                           proof_timeout=1.0 if answer == "none" else 30.0) as server:
            assert isinstance(server, ZmqEndpoint)
            dealer = member_dealer(ctx, creds, server.address, sender=name, keypair=keypair)
            dealer.send_multipart(_envelope([b"a%d" % i for i in range(5)]))
            dealer.send(b"b")
            peers = server.peers
            held: list[int] = []

            def settled() -> bool:
                held.append(peers.sizes()["held"])
                return peers.refused_unproven + peers.refused_spoof >= 6

            got = drain_until(server, settled, "the claim to be settled")
            assert got == []
            counter = "unproven" if answer == "none" else "spoof"
            assert peers.counts()[counter] == 6  # five in the batch, one alone
            assert max(held) <= 6 and peers.sizes()["held"] == 0
            if answer == "none":  # (an answer for another key may come before a receive)
                assert 6 in held
    finally:
        if member is not None:
            member.close()


def test_a_malformed_batch_from_a_sender_being_proven_is_dropped_after_the_proof(
        creds: ClusterCredentials, ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
    member = AnsweringMember(ctx, creds)
    try:
        with open_endpoint("tcp://127.0.0.1:0", credentials=creds) as server:
            assert isinstance(server, ZmqEndpoint)
            dealer = member_dealer(ctx, creds, server.address, sender=member.address,
                                   keypair=member.keypair)
            dealer.send_multipart([b"", struct.pack("<BI", zb.VERSION, 99)])  # lengths missing
            dealer.send(b"after")
            assert _receive(server, 1) == [(member.address, [b"after"])]
            assert server.dropped_malformed == 1
    finally:
        member.close()


def test_a_receive_waiting_for_a_proof_sends_the_batches_it_held_first(
        creds: ClusterCredentials, ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
    """While a sender's address is being proven, a receive waits for the answer: what the
    endpoint holds for its peers goes before that wait, not when the proof ends."""
    with open_endpoint("tcp://127.0.0.1:0", credentials=creds, coalesce=True,
                       proof_timeout=600.0) as server, \
            open_endpoint("tcp://127.0.0.1:0", credentials=creds) as peer:
        assert isinstance(server, ZmqEndpoint) and isinstance(peer, ZmqEndpoint)
        with open_endpoint("tcp://127.0.0.1:0", credentials=creds) as gone:
            name = gone.address  # an address nobody answers at: its proof waits
        dealer = member_dealer(ctx, creds, server.address, sender=name)
        dealer.send(b"claim 1")
        assert drain_until(server, lambda: server.peers.sizes()["held"] == 1,
                           "the claim to be held") == []
        server.send(peer.address, [b"first"])  # goes at once
        server.send(peer.address, [b"held"])  # held for the server's next receive
        assert _receive(peer, 1) == [(server.address, [b"first"])]
        dealer.send(b"claim 2")  # waiting when the server next receives: it holds on
        wait_until(lambda: bool(server._router.get(zmq.EVENTS) & zmq.POLLIN), 30,
                   "the second claim to wait at the server")
        got: list[object] = []
        waiting = threading.Thread(target=lambda: got.append(server.recv(None)))
        waiting.start()
        try:
            assert _receive(peer, 1) == [(server.address, [b"held"])]
        finally:
            server.wake()
            waiting.join(60)
        assert got == [None] and server.peers.sizes()["held"] == 2
