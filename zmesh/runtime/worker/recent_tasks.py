"""The tasks a worker took lately, so a task its owner sends again runs at most once, and
the answers to its latest actor calls, so a call its caller sends again is answered again.

An owner sends a task again when no result came for a while (`owner/submit.py`'s resend
sweep): its `ExecuteTask` may have been lost on the way, or the `TaskResult` on the way
back, or the task may just be slow. The worker tells the three apart by the task's id and
attempt: one it never saw runs; one queued or running is ignored (its result goes out when
it ends); one it finished is answered again from the result kept here. Bounded: the oldest
entries go first (a resend comes seconds after the first send, not hundreds of tasks later).
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque

from zmesh.protocol.messages import runtime as m

__all__ = ["CallReplies", "RecentTasks"]

KEEP = 512
"""Tasks remembered (queued, running or finished) per worker."""

KEEP_BYTES = 8 << 20
"""Bytes of kept answers (values inline in them) per worker: the oldest answers go first.
A repeat whose answer was dropped runs again (a task), or fails with ObjectLostError (an
actor call: it ran, and may not run twice; a fast caller makes 512 calls in ~30 ms, well
inside the 3 s before a resend, so this is not only a corner)."""


def _size(result: m.TaskResult) -> int:
    returns = result.returns
    if len(returns) == 1:  # the common case, without a generator
        return 64 + len(returns[0].data)
    return 64 + sum(len(v.data) for v in returns)


_RUNNING = None
_ABSENT = object()


class RecentTasks:
    """(task id, attempt) -> None while queued or running, its TaskResult once finished.

    Every task passes here twice (`take`, `finished`), so both are a lock, a dict operation
    or two and a size; past `keep` (by a sixteenth) the oldest finished go, in one batch.
    The oldest entry is the first, usually finished (tasks end in about the order they
    came): an OrderedDict finds it at once, where a plain dict would scan past the slots of
    those taken before it. Only finished entries can go: while none is (a chain of
    thousands of tasks queued at once) no trim runs, where one at every task scanned them
    all."""

    def __init__(self, keep: int = KEEP) -> None:
        self._keep = keep
        self._trim_at = keep + keep // 16
        self._tasks: OrderedDict[tuple[bytes, int], m.TaskResult | None] = OrderedDict()
        self._bytes = 0
        self._done = 0  # finished entries (the ones a trim may drop)
        self._lock = threading.Lock()  # the loop thread takes, the executor thread finishes

    def take(self, msg: m.ExecuteTask) -> tuple[bool, m.TaskResult | None]:
        """(run it?, the result to send again). A new task is recorded as running."""
        key = (msg.task_id, msg.attempt)
        tasks = self._tasks
        with self._lock:
            known = tasks.get(key, _ABSENT)
            if known is not _ABSENT:
                return False, known  # type: ignore[return-value]
            tasks[key] = _RUNNING
            if len(tasks) > self._trim_at and self._done:  # in batches: not at every task
                self._trim()
            return True, None

    def finished(self, task_id: bytes, attempt: int, result: m.TaskResult) -> None:
        """The task's result went out: keep it for a resend."""
        key = (task_id, attempt)
        returns = result.returns
        size = 64 + len(returns[0].data) if len(returns) == 1 else _size(result)
        tasks = self._tasks
        with self._lock:
            if key in tasks and tasks[key] is None:
                tasks[key] = result
                self._done += 1
                self._bytes += size
                if self._bytes > KEEP_BYTES or len(tasks) > self._trim_at:
                    self._trim()

    def _trim(self) -> None:
        """Forget the oldest finished tasks past the bounds. A queued or running one is
        kept (forgetting it would let a repeat run it a second time beside it): set aside
        and put back first. Tasks end in the order they came, so the finished ones are the
        oldest but for the one running (put back first by an earlier trim)."""
        tasks = self._tasks
        keep = self._keep
        aside: list[tuple[bytes, int]] = []
        while (len(tasks) + len(aside) > keep or self._bytes > KEEP_BYTES) and self._done:
            key, old = tasks.popitem(last=False)  # the oldest, usually finished
            if old is None:
                aside.append(key)
                continue
            self._done -= 1
            returns = old.returns
            self._bytes -= 64 + len(returns[0].data) if len(returns) == 1 else _size(old)
        for key in reversed(aside):
            tasks[key] = None
            tasks.move_to_end(key, last=False)


class CallReplies:
    """An actor's latest answers, to send again when a caller repeats a call it did not hear
    back from (its mailbox drops the repeat: it ran, or runs, already), and the calls
    released but not yet answered, so a repeat tells "still running" (its answer will come)
    from "answered and forgotten" (it never will).

    Every call of an actor comes through `expect` and `put`, and a repeat is rare (a caller
    repeats a call seconds after it sent it): so the answers are kept in the order they went
    out, in a bounded deque with no index by call id, and a repeat looks its answer up by a
    scan from the newest (~10 us for 512, once per repeat instead of a dict entry made and
    dropped per call)."""

    def __init__(self, keep: int = KEEP) -> None:
        self._keep = keep
        self._replies: deque[m.TaskResult] = deque()
        self._pending: set[bytes] = set()
        self._bytes = 0
        self._lock = threading.Lock()  # call threads put, the loop thread gets

    def expect(self, task_id: bytes) -> None:
        """A call was released to run: its answer comes with `put`. (No lock: one set add
        is atomic, and `put` and `repeat` take the lock for what they read together.)"""
        self._pending.add(task_id)

    def put(self, result: m.TaskResult) -> None:
        returns = result.returns
        size = 64 + len(returns[0].data) if len(returns) == 1 else _size(result)
        replies = self._replies
        with self._lock:
            self._pending.discard(result.task_id)
            if len(replies) >= self._keep:  # the oldest goes (its size is read again)
                self._bytes -= _size(replies.popleft())
            replies.append(result)
            self._bytes += size
            while self._bytes > KEEP_BYTES and replies:
                self._bytes -= _size(replies.popleft())

    def get(self, task_id: bytes) -> m.TaskResult | None:
        """The newest answer kept for the call, if any."""
        with self._lock:
            for result in reversed(self._replies):
                if result.task_id == task_id:
                    return result
        return None

    def repeat(self, task_id: bytes) -> tuple[m.TaskResult | None, bool]:
        """For a repeat of a released call: (its kept answer, whether it was forgotten).

        A call running now has no answer yet, whatever is kept under its id: a call sent
        again by `retry_exceptions` keeps its id, and the answer kept is its previous
        attempt's exception (sent back for a repeat of the new attempt, the caller took it
        for that attempt's answer)."""
        with self._lock:
            if task_id in self._pending:
                return None, False
            for result in reversed(self._replies):
                if result.task_id == task_id:
                    return result, False
            return None, True
