"""The node's membership on a real event loop whose handlers take time (a virtual clock):
an ack that waits in the inbox behind other messages when the probe's time is up."""

from __future__ import annotations

import math
import random
from collections import deque
from typing import Any

import pytest

from zmesh.protocol import codec
from zmesh.protocol.messages.common import Ping
from zmesh.protocol.messages.membership import (
    Join,
    MemberState,
    MemberUpdate,
    Metadata,
    Probe,
    ProbeAck,
)
from zmesh.runtime import loop as loop_module
from zmesh.runtime.loop import EventLoop
from zmesh.runtime.node.mesh import MeshAgent

A, B = "tcp://a:1", "tcp://b:1"
NODE = "zmesh.node_id"
CHUNK_S = 0.06  # handling each message of B's bulk traffic takes this long


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


class BusyPeerEndpoint:
    """A's endpoint. B answers every probe at once, but its ack lands in A's inbox behind
    `backlog` messages of B's bulk traffic (chunks ahead of it on the same connection)."""

    address = A

    def __init__(self, clock: Clock, backlog: int) -> None:
        self.clock = clock
        self.backlog = backlog
        self.inbox: deque[tuple[str, list[Any]]] = deque()

    def send(self, to: str, frames: list[Any]) -> None:
        msg = codec.decode_small(frames[0])
        if to == B and isinstance(msg, Probe):
            self.inbox.extend((B, [codec.encode(Ping(seq=0))]) for _ in range(self.backlog))
            self.inbox.append((B, [codec.encode(ProbeAck(msg.seq, []))]))

    def recv(self, timeout: float | None) -> Any:
        if self.inbox:
            return self.inbox.popleft()
        assert timeout is not None, "the loop would sleep forever"
        self.clock.now += math.ceil(timeout * 1000) / 1000
        return None

    def wake(self) -> None:
        pass

    def flush(self) -> None:
        pass


def test_an_ack_waiting_behind_bulk_messages_keeps_its_member_alive(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # B acks every probe, yet A's loop, busy with B's chunks (each CHUNK_S), ran the
    # membership timer before reaching the ack queued behind them and suspected B at
    # every probe period; under load that went on to a false death.
    clock = Clock()
    monkeypatch.setattr(loop_module, "time", clock)
    endpoint = BusyPeerEndpoint(clock, backlog=4)
    loop = EventLoop(endpoint, "a")  # type: ignore[arg-type]
    loop.on(Ping, lambda sender, msg, bufs: setattr(clock, "now", clock.now + CHUNK_S))
    mesh = MeshAgent(loop, A, "node-a", total=lambda: {"CPU": 1.0}, free=lambda: {"CPU": 1.0},
                     labels={}, ipc_address="ipc:///a", pid=1, on_view=lambda view: None,
                     on_gone=lambda *a: None, rng=random.Random(1))
    events: list[str] = []
    mesh.on_event = events.append
    probes = []
    send = endpoint.send
    endpoint.send = lambda to, frames: (  # type: ignore[method-assign]
        probes.append(to) if isinstance(codec.decode_small(frames[0]), Probe) else None,
        send(to, frames))[-1]
    joiner = MemberUpdate(B, MemberState.ALIVE, 0, Metadata(0, {}, {NODE: "node-b"}))

    def begin() -> None:
        mesh.start([])
        mesh._on_message(B, Join(joiner), [])
        loop.call_later(5.0, loop.stop)

    loop.call_soon(begin)
    loop.run()
    assert "joined" in events
    assert "suspect" not in events and "dead" not in events, events
    assert len(probes) >= 10, f"B was probed all along: {len(probes)} probes in 5 s"

