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
