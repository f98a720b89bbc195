"""The tasks a worker took lately, so a task its owner sends again runs at most once.

An owner sends a task again when no result came for a while (`owner/submit.py`'s resend
sweep): its `ExecuteTask` may have been lost on the way, or the `TaskResult` on the way
back, or the task may just be slow. The worker tells the three apart by the task's id and
attempt: one it never saw runs; one queued or running is ignored (its result goes out when
it ends); one it finished is answered again from the result kept here. Bounded: the oldest
entries go first (a resend comes seconds after the first send, not hundreds of tasks later).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from zmesh.protocol.messages import runtime as m

__all__ = ["RecentTasks"]

KEEP = 512
"""Tasks remembered (queued, running or finished) per worker."""

_RUNNING = None


class RecentTasks:
    """(task id, attempt) -> None while queued or running, its TaskResult once finished."""

    def __init__(self, keep: int = KEEP) -> None:
        self._keep = keep
        self._tasks: OrderedDict[tuple[bytes, int], m.TaskResult | None] = OrderedDict()
        self._lock = threading.Lock()  # the loop thread takes, the executor thread finishes

    def take(self, msg: m.ExecuteTask) -> tuple[bool, m.TaskResult | None]:
        """(run it?, the result to send again). A new task is recorded as running."""
        key = (msg.task_id, msg.attempt)
        with self._lock:
            if key not in self._tasks:
                self._tasks[key] = _RUNNING
                while len(self._tasks) > self._keep:
                    self._tasks.popitem(last=False)
                return True, None
            return False, self._tasks[key]

    def finished(self, task_id: bytes, attempt: int, result: m.TaskResult) -> None:
        """The task's result went out: keep it for a resend."""
        with self._lock:
            if (task_id, attempt) in self._tasks:
                self._tasks[(task_id, attempt)] = result
