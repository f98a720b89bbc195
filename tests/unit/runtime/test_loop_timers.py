"""The event loop's timers on a virtual clock: when an idle loop wakes, and how late."""

from __future__ import annotations

import math
from typing import Any

import pytest

from zmesh.runtime import loop as loop_module
from zmesh.runtime.loop import TIMER_SLACK_S, EventLoop


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


class IdleEndpoint:
    """No message ever comes: each receive blocks for its whole timeout (zmq rounds it up
    to whole ms) on the virtual clock."""

    address = "inproc://idle"

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.waits: list[float | None] = []

    def recv(self, timeout: float | None) -> Any:
        self.waits.append(timeout)
        assert timeout is not None and len(self.waits) < 1000, "the loop would sleep forever"
        self.clock.now += math.ceil(timeout * 1000) / 1000
        return None

    def wake(self) -> None:
        pass

    def flush(self) -> None:
        pass


def test_an_idle_loop_wakes_once_per_timer_and_runs_it_on_time(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Waits rounded down to powers of two ms woke an idle loop ~log2(ms) times per timer:
    # ~80 wake-ups a second on an idle node, most of its idle CPU.
    clock = Clock()
    monkeypatch.setattr(loop_module, "time", clock)
    endpoint = IdleEndpoint(clock)
    loop = EventLoop(endpoint, "test")  # type: ignore[arg-type]
    start = clock.now
    delays = [0.1, 0.25, 0.3, 0.937]
    fired: list[float] = []

    def arm() -> None:
        for delay in delays:
            loop.call_later(delay, lambda: fired.append(clock.now - start))
        loop.call_later(max(delays), loop.stop)

    loop.call_soon(arm)
    loop.run()
    assert len(fired) == len(delays)
    for due, at in zip(delays, fired):
        assert due - 1e-9 <= at <= due + TIMER_SLACK_S + 0.001, (due, at)
    assert len(endpoint.waits) <= len(delays) + 1, endpoint.waits


class QueueEndpoint(IdleEndpoint):
    """Messages already waiting in the inbox (Pings, each `cost` s to handle)."""

    def __init__(self, clock: Clock, waiting: int) -> None:
        super().__init__(clock)
        from zmesh.protocol import codec
        from zmesh.protocol.messages.common import Ping

        self.inbox = [("inproc://peer", [codec.encode(Ping(seq=i))]) for i in range(waiting)]

    def recv(self, timeout: float | None) -> Any:
        if self.inbox:
            return self.inbox.pop(0)
        return super().recv(timeout)


def _handled(loop: EventLoop, clock: Clock, cost: float) -> list[int]:
    from zmesh.protocol.messages.common import Ping

    seen: list[int] = []

    def handle(sender: str, msg: Any, bufs: list[Any]) -> None:
        seen.append(msg.seq)
        clock.now += cost

    loop.on(Ping, handle)
    return seen


def test_call_when_idle_runs_after_the_messages_already_received(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    monkeypatch.setattr(loop_module, "time", clock)
    endpoint = QueueEndpoint(clock, waiting=5)
    loop = EventLoop(endpoint, "test")  # type: ignore[arg-type]
    seen = _handled(loop, clock, cost=0.01)
    ran: list[int] = []
    loop.call_soon(lambda: loop.call_when_idle(lambda: ran.append(len(seen)), max_wait=1.0))
    loop.call_later(0.5, loop.stop)
    loop.run()
    assert ran == [5], "after all five waiting messages, once"


def test_call_when_idle_runs_by_its_deadline_when_messages_keep_coming(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    monkeypatch.setattr(loop_module, "time", clock)
    endpoint = QueueEndpoint(clock, waiting=1000)
    loop = EventLoop(endpoint, "test")  # type: ignore[arg-type]
    seen = _handled(loop, clock, cost=0.01)
    start = clock.now
    ran: list[float] = []

    def arm() -> None:
        loop.call_when_idle(lambda: ran.append(clock.now - start), max_wait=0.2)
        loop.call_later(1.0, loop.stop)

    loop.call_soon(arm)
    loop.run()
    assert len(ran) == 1 and 0.2 <= ran[0] <= 0.2 + 0.011, ran
    assert len(seen) < 1000


def test_call_when_idle_leaves_no_timer_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    # A bound kept as a timer woke the loop once more for every membership tick (most run
    # at once, the inbox empty): idle CPU.
    clock = Clock()
    monkeypatch.setattr(loop_module, "time", clock)
    endpoint = IdleEndpoint(clock)
    loop = EventLoop(endpoint, "test")  # type: ignore[arg-type]
    ran: list[float] = []

    def arm() -> None:
        loop.call_when_idle(lambda: ran.append(clock.now), max_wait=0.5)
        loop.call_later(1.0, loop.stop)

    loop.call_soon(arm)
    loop.run()
    assert len(ran) == 1
    assert [w for w in endpoint.waits if w] == [pytest.approx(1.0)], endpoint.waits
