"""Actor calls with no answer go again (runtime/owner/call_resends.py), on a virtual clock:
a call is stamped with the next sweep's time, not the clock's, and still goes again about
RESEND_AFTER_S after it was sent, never before a sweep's worth of it."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import Any

from zmesh.protocol.messages import runtime as m
from zmesh.runtime.owner.call_resends import CallResends
from zmesh.runtime.owner.resend import RESEND_AFTER_S, SWEEP_S


class _Loop:
    def __init__(self) -> None:
        self.now = 100.0
        self.sent: list[tuple[float, str, bytes]] = []
        self._timers: list[tuple[float, int, Callable[[], Any]]] = []
        self._seq = itertools.count()

    def clock(self) -> float:
        return self.now

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        fn(*args)

    def call_later(self, delay: float, fn: Callable[[], Any]) -> None:
        heapq.heappush(self._timers, (self.now + delay, next(self._seq), fn))

    def send(self, to: str, msg: m.ActorCall) -> bool:
        self.sent.append((self.now, to, msg.task_id))
        return True

    def run_until(self, t: float) -> None:
        while self._timers and self._timers[0][0] <= t:
            when, _, fn = heapq.heappop(self._timers)
            self.now = when
            fn()
        self.now = t


def _call(tid: bytes) -> m.ActorCall:
    return m.ActorCall(actor_id=b"a", caller="me", seq=0, task_id=tid, method="f", args=m.Args())


def test_an_unanswered_call_goes_again_after_about_resend_after_s() -> None:
    loop = _Loop()
    calls = {b"early", b"late", b"answered"}
    resends = CallResends(loop, calls)  # type: ignore[arg-type]
    start = loop.now
    resends.sent("w", _call(b"early"))
    loop.run_until(start + SWEEP_S * 0.9)
    resends.sent("w", _call(b"late"))  # just before the first sweep
    resends.sent("w", _call(b"answered"))
    resends.answered(b"answered")
    calls.discard(b"answered")
    loop.run_until(start + 20 * RESEND_AFTER_S)
    first = {tid: t for t, _, tid in reversed(loop.sent)}
    assert b"answered" not in first
    for tid, sent_at in ((b"early", start), (b"late", start + SWEEP_S * 0.9)):
        waited = first[tid] - sent_at
        assert RESEND_AFTER_S - SWEEP_S <= waited <= RESEND_AFTER_S + SWEEP_S, (tid, waited)
    # then ever more rarely: each wait twice the last (up to the cap)
    early = [t for t, _, tid in loop.sent if tid == b"early"]
    gaps = [b - a for a, b in zip(early, early[1:])]
    assert gaps and all(g2 >= g1 for g1, g2 in zip(gaps, gaps[1:]))


def test_sweeping_stops_once_every_call_is_answered_and_starts_again() -> None:
    loop = _Loop()
    calls = {b"x"}
    resends = CallResends(loop, calls)  # type: ignore[arg-type]
    resends.sent("w", _call(b"x"))
    resends.answered(b"x")
    loop.run_until(loop.now + 10 * SWEEP_S)
    assert not loop._timers and not loop.sent  # disarmed, nothing sent
    calls.add(b"y")
    later = loop.now
    resends.sent("w", _call(b"y"))  # stamped from the clock again, not a stale sweep time
    loop.run_until(later + RESEND_AFTER_S - SWEEP_S * 0.5)
    assert not loop.sent
    loop.run_until(later + RESEND_AFTER_S + SWEEP_S)
    assert [tid for _, _, tid in loop.sent] == [b"y"]
