"""Tasks sent to a worker with no result yet, and when to send each again.

A message between an owner and a worker can be lost (a connection that breaks and comes
back, a link fault in the simulated mesh). If the `ExecuteTask` is lost the task never runs;
if the `TaskResult` is lost the owner never hears of it; either way its `get` would wait
forever. So the owner sends a task again when no result came `RESEND_AFTER_S` after it was
sent, then after twice that, and so on up to `MAX_WAIT_S` (a long task is asked about ever
more rarely; a lossy link still gets four tries within 30 s). The
worker runs a task once per attempt and answers a repeat from the result it kept
(`worker/recent_tasks.py`), or not at all while the task still runs. One sweep per owner
every `SWEEP_S` while tasks are out: nothing per task on the hot path but a dict entry.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from zmesh.core.task_owner import Send

__all__ = ["MAX_WAIT_S", "RESEND_AFTER_S", "SWEEP_S", "Resends"]

RESEND_AFTER_S = float(os.environ.get("ZMESH_TASK_RESEND_S", "3.0"))
"""Seconds without a result before a task is sent again (then 2x, 4x, ... that)."""

MAX_WAIT_S = 10 * RESEND_AFTER_S
"""The longest wait between two sends of one task."""

SWEEP_S = RESEND_AFTER_S / 2


class Resends:
    """The tasks out at workers (loop thread, or a user thread holding the submitter's lock)."""

    def __init__(self) -> None:
        # task id -> (its send, when sent, how long to wait): a tuple, as every task makes one
        self._out: dict[bytes, tuple[Send, float, float]] = {}

    def __len__(self) -> int:
        return len(self._out)

    def sent(self, action: Send, now: float) -> None:
        """`action`'s task went to its worker at `now`."""
        self._out[action.task_id] = (action, now, RESEND_AFTER_S)

    def answered(self, task_id: bytes) -> None:
        """Its result came (or it ended otherwise): stop watching it."""
        self._out.pop(task_id, None)

    def due(self, now: float, placed: Callable[[bytes], tuple[bytes, int] | None]
            ) -> list[Send]:
        """The sends to make again now. `placed(task id)`: the (lease, attempt) the core
        has the task out on, if any; a watched task no longer there (ended, moved to another
        lease, retried) is forgotten."""
        again: list[Send] = []
        out = self._out
        for tid, (action, sent_at, wait) in list(out.items()):
            if placed(tid) != (action.lease_id, action.attempt):
                del out[tid]
            elif now - sent_at >= wait:
                again.append(action)
                out[tid] = (action, now, min(wait * 2, MAX_WAIT_S))
        return again
