"""Actor calls sent with no answer yet, and when to send each again (as `resend.py` does
for tasks).

A call lost on its way leaves a gap in the actor's per-caller sequence: that call and every
later one of this caller would wait forever in the actor's mailbox; a lost answer leaves the
call's `get` waiting. So a call with no answer `RESEND_AFTER_S` after it was sent goes again,
to the same worker with the same sequence number, then after twice that, and so on up to
`MAX_WAIT_S`. The actor's mailbox drops a repeat of a call it released already, and its
worker answers such a repeat again from the answers it kept (`worker/recent_tasks.py`), or
not at all while the call still runs. A call the caller core sends anew (the actor
restarted) is watched from that send; one that ended is forgotten at the next sweep.
Any thread records a send (a dict entry); one timer per process sweeps while calls are out.
"""

from __future__ import annotations

from collections.abc import Container

from zmesh.protocol.messages import runtime as m
from zmesh.runtime.loop import EventLoop
from zmesh.runtime.owner.resend import MAX_WAIT_S, RESEND_AFTER_S, SWEEP_S

__all__ = ["CallResends"]


class CallResends:
    """The calls out at actors (`calls`: the ids of those still waiting for an answer)."""

    def __init__(self, loop: EventLoop, calls: Container[bytes]) -> None:
        self._loop = loop
        self._calls = calls
        self._out: dict[bytes, tuple[str, m.ActorCall, float, float]] = {}
        self._armed = False
        self._stamp = 0.0  # the time of the next sweep, while armed

    def sent(self, address: str, msg: m.ActorCall) -> None:
        """`msg` went to the worker at `address` (any thread).

        Stamped with the time the next sweep is due, not read from the clock at every call
        (a clock read per call was a tenth of this record's cost): a call sent between two
        sweeps goes again at the same sweep as its own send time would say, give or take
        one (the sweeps' granularity anyway); a repeat is harmless (the actor drops it)."""
        if not self._armed:
            self._stamp = self._loop.clock() + SWEEP_S
            self._armed = True
            self._loop.call_soon(self._arm)
        self._out[msg.task_id] = (address, msg, self._stamp, RESEND_AFTER_S)

    def answered(self, task_id: bytes) -> None:
        self._out.pop(task_id, None)

    def _arm(self) -> None:
        self._stamp = self._loop.clock() + SWEEP_S
        self._loop.call_later(SWEEP_S, self._sweep)

    def _sweep(self) -> None:
        now = self._loop.clock()
        out = self._out
        for tid, entry in list(out.items()):
            address, msg, sent_at, wait = entry
            if tid not in self._calls:
                if out.get(tid) is entry:
                    out.pop(tid, None)
            elif now - sent_at >= wait:
                self._loop.send(address, msg)
                if out.get(tid) is entry:  # not sent anew meanwhile (an actor restart)
                    out[tid] = (address, msg, now, min(wait * 2, MAX_WAIT_S))
        if self._out:
            self._stamp = now + SWEEP_S
            self._loop.call_later(SWEEP_S, self._sweep)
        else:
            self._armed = False
            if self._out:  # a send raced the last check: keep sweeping
                self._armed = True
                self._stamp = now + SWEEP_S
                self._loop.call_later(SWEEP_S, self._sweep)
