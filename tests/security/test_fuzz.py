"""Fuzzing a live node's tcp port: garbage from strangers and from an authenticated member.

Strangers: random frames and multipart messages from plain DEALERs whose routing ids are not
UTF-8, CURVE clients with guessed keys, raw bytes without a ZMTP greeting, truncated
greetings, and thousands of connections opened and dropped. A member (it holds the token):
random, truncated, bit-flipped and schema-valid-but-odd messages, which do reach handlers.
Afterwards the node is alive, serves a driver, and its fds and memory are back within bounds.
"""

from __future__ import annotations

import os
import random
import socket
from collections.abc import Iterator

import msgspec
import pytest
import zmq
from security_fixtures import fd_count, rss, wait_until

import zmesh
from zmesh.protocol import codec
from zmesh.protocol.messages import runtime as m
from zmesh.protocol.messages.base import Message
from zmesh.security.keys import ClusterCredentials
from zmesh.security.probe import handshake
from zmesh.testing import Cluster
from zmesh.transports import open_endpoint

FD_SLACK = 48
"""fds the node may hold above its baseline once the fuzzing connections are gone."""
RSS_SLACK = 64 << 20


@zmesh.remote
def square(x: int) -> int:
    return x * x


def _baseline(cluster: Cluster) -> tuple[int, int, int]:
    """(pid, fds, rss) of the node once it has answered a Hello over tcp."""
    assert cluster.head_node is not None
    handshake(f"tcp://{cluster.address}", cluster.credentials)
    pid = cluster.head_node.pid
    return pid, fd_count(pid), rss(pid)


def _sample_messages(rng: random.Random) -> list[Message]:
    owner = "tcp://127.0.0.1:1"
    return [
        m.Query(request_id=rng.randrange(1 << 30), what=rng.choice(["nodes", "x", "block"]),
                arg=rng.randbytes(rng.randrange(8))),
        m.GetObject(object_id=rng.randbytes(20), requester=owner),
        m.ReturnLease(lease_id=rng.randbytes(16)) if hasattr(m, "ReturnLease") else m.Shutdown(),
        m.UnpinObject(object_id=rng.randbytes(20), client=owner)
        if hasattr(m, "UnpinObject") else m.Shutdown(),
        m.LogLines(lines=["x"] * rng.randrange(3)) if _constructible(m.LogLines) else m.Shutdown(),
    ]


def _constructible(cls: type) -> bool:
    try:
        cls(lines=[])
    except TypeError:
        return False
    return True


def _member_frames(rng: random.Random, count: int) -> Iterator[list[bytes]]:
    """Garbage an authenticated peer might send; never a valid Shutdown (members may)."""
    samples = [codec.encode(msg) for msg in _sample_messages(rng)
               if not isinstance(msg, m.Shutdown)]
    for i in range(count):
        kind = i % 5
        if kind == 0:
            frame = rng.randbytes(rng.randrange(64))
        elif kind == 1:
            base = rng.choice(samples)
            frame = base[: rng.randrange(len(base))]
        elif kind == 2:
            raw = bytearray(rng.choice(samples))
            for _ in range(rng.randrange(1, 4)):
                raw[rng.randrange(len(raw))] ^= 1 << rng.randrange(8)
            frame = bytes(raw)
        elif kind == 3:  # msgpack arrays that look like messages: tag then odd fields
            frame = msgspec.msgpack.encode([rng.randrange(128)] + [
                rng.choice([None, -1, "", b"", [], {}, 2**63, 1.5]) for _ in range(rng.randrange(6))])
        else:
            frame = rng.choice(samples)
        try:
            if isinstance(codec.decode(frame), m.Shutdown):
                continue
        except Exception:
            pass
        extra = [rng.randbytes(rng.randrange(32)) for _ in range(rng.randrange(3))]
        yield [frame, *extra]


def _stranger_dealers(target: str, rng: random.Random, frames: int) -> int:
    ctx = zmq.Context()
    sent = 0
    try:
        for n in range(10):
            dealer = ctx.socket(zmq.DEALER)
            dealer.linger = 0
            dealer.sndhwm = frames
            dealer.setsockopt(zmq.ROUTING_ID, bytes([0x80 + n]) + rng.randbytes(8))
            if n % 2:  # a CURVE client guessing the server key
                dealer.curve_publickey, dealer.curve_secretkey = zmq.curve_keypair()
                dealer.curve_serverkey = zmq.curve_keypair()[0]
            dealer.connect(target)
            for _ in range(frames // 10):
                parts = [rng.randbytes(rng.randrange(1, 200)) for _ in range(rng.randrange(1, 4))]
                try:
                    dealer.send_multipart(parts, zmq.NOBLOCK)
                except zmq.Again:
                    pass
                sent += 1
            dealer.close()
    finally:
        ctx.term()
    return sent


def _raw_connections(host: str, port: int, rng: random.Random, count: int) -> int:
    """Open and drop `count` tcp connections: silent, random bytes, truncated greetings."""
    greeting = b"\xff" + b"\x00" * 8 + b"\x7f\x03\x00" + b"CURVE".ljust(20, b"\x00")
    for i in range(count):
        with socket.create_connection((host, port), timeout=10) as s:
            try:
                if i % 3 == 1:
                    s.sendall(rng.randbytes(rng.randrange(1, 512)))
                elif i % 3 == 2:
                    s.sendall(greeting[: rng.randrange(1, len(greeting))])
            except OSError:
                pass
    return count


def _fuzz(cluster: Cluster, *, frames: int, connections: int, seed: int) -> dict[str, int]:
    pid, fds0, rss0 = _baseline(cluster)
    rng = random.Random(seed)
    assert cluster.address is not None
    host, port = cluster.address.rsplit(":", 1)
    target = f"tcp://{cluster.address}"
    counts = {"stranger_frames": _stranger_dealers(target, rng, frames // 2)}
    member_sent = 0
    with open_endpoint("tcp://127.0.0.1:0", credentials=cluster.credentials,
                       sndhwm=frames) as member:
        # One round trip first: the node asks the member's address who it is (and the member
        # the node's) before taking anything from it, so that its frames reach handlers.
        member.send(target, [codec.encode(m.Query(request_id=1, what="metrics"))])
        answer = member.recv(60)
        assert answer is not None and answer[0] == target, answer
        for parts in _member_frames(rng, frames - counts["stranger_frames"]):
            member.send(target, parts)
            member_sent += 1
        handshake(target, cluster.credentials)  # the member's frames were all taken
    counts["member_frames"] = member_sent
    counts["connections"] = _raw_connections(host, int(port), rng, connections)
    # Another mesh's endpoint and a non-UTF-8 stranger: refused, nothing reaches Python.
    with open_endpoint("tcp://127.0.0.1:0", credentials=ClusterCredentials.generate()) as x:
        x.send(target, [os.urandom(16)])
    zmesh.init(address=cluster.address)
    try:
        assert zmesh.get([square.remote(i) for i in range(5)], timeout=60) == [0, 1, 4, 9, 16]
    finally:
        zmesh.shutdown()
    assert cluster.head_node is not None and cluster.head_node.alive()
    wait_until(lambda: fd_count(pid) <= fds0 + FD_SLACK, 60,
               f"the node's fds to come back near {fds0} (now {fd_count(pid)})")
    counts.update(fds_before=fds0, fds_after=fd_count(pid), rss_growth=rss(pid) - rss0)
    assert counts["rss_growth"] <= RSS_SLACK, counts
    return counts


@pytest.mark.timeout(600)
def test_fuzzing_the_tcp_port_leaves_the_node_serving_with_bounded_fds(mesh: Cluster) -> None:
    counts = _fuzz(mesh, frames=10_000, connections=2_000, seed=7)
    assert counts["stranger_frames"] + counts["member_frames"] >= 9_000
    assert counts["connections"] == 2_000
    print("fuzz", counts)
