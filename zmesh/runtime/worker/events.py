"""What a worker ran and when, for `zmesh timeline`: a bounded record of task spans.

Recording costs a clock read and a tuple per task; the worker's loop ships the finished
spans to its node about once a second (`drain`), so nothing is sent while nothing runs.
"""

from __future__ import annotations

import threading
import time
from collections import deque

from zmesh.protocol.messages.ops import TaskEvent

#: finished spans a worker holds before the oldest are dropped (if its node stops reading)
MAX_PENDING = 10_000
#: an error's text is cut to this length in the timeline
MAX_ERROR_CHARS = 500


class EventRecorder:
    """Start and end times of the tasks this worker runs (thread-safe: async actors and
    threaded actors run calls on several threads)."""

    def __init__(self) -> None:
        self._started: dict[bytes, tuple[str, str, float]] = {}
        self._done: deque[TaskEvent] = deque(maxlen=MAX_PENDING)
        self._lock = threading.Lock()
        self._errors = threading.local()

    def begin(self, task_id: bytes, name: str, kind: str) -> None:
        with self._lock:
            self._started[task_id] = (name, kind, time.time())

    def note_error(self, text: str) -> None:
        """The error the task running on this thread failed with (read by `end`)."""
        self._errors.text = text[:MAX_ERROR_CHARS]

    def end(self, task_id: bytes, ok: bool) -> None:
        now = time.time()
        error = "" if ok else getattr(self._errors, "text", "")
        self._errors.text = ""
        with self._lock:
            began = self._started.pop(task_id, None)
            if began is not None:
                name, kind, start = began
                self._done.append(TaskEvent(task_id, name, kind, start, now, ok, error))

    def drain(self) -> list[TaskEvent]:
        """The spans finished since the last drain."""
        with self._lock:
            out = list(self._done)
            self._done.clear()
        return out


#: this process's recorder (one worker per process)
recorder = EventRecorder()
