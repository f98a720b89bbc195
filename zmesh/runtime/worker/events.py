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
#: running tasks a worker reports at most (an async actor may run thousands of calls)
MAX_RUNNING = 1_000


class EventRecorder:
    """Start and end times of the tasks this worker runs. Safe from several threads (async
    and threaded actors) without a lock: each step is one dict or deque operation, which the
    interpreter does atomically."""

    def __init__(self) -> None:
        self._started: dict[bytes, tuple[str, str, float]] = {}
        self._done: deque[TaskEvent] = deque(maxlen=MAX_PENDING)
        self._errors = threading.local()

    def begin(self, task_id: bytes, name: str, kind: str) -> None:
        self._started[task_id] = (name, kind, time.time())

    def note_error(self, text: str) -> None:
        """The error the task running on this thread failed with (read by `end`)."""
        self._errors.text = text[:MAX_ERROR_CHARS]

    def end(self, task_id: bytes, ok: bool) -> None:
        began = self._started.pop(task_id, None)
        if began is None:
            return
        error = ""
        if not ok:
            error = getattr(self._errors, "text", "")
            self._errors.text = ""
        name, kind, start = began
        self._done.append(TaskEvent(task_id, name, kind, start, time.time(), ok, error))

    def running(self, most: int = MAX_RUNNING) -> list[TaskEvent]:
        """What runs now (at most `most`), as spans that have not ended (`end` 0)."""
        now = list(self._started.items())  # (one C call: no thread changes it meanwhile)
        return [TaskEvent(task_id, name, kind, start, 0.0)
                for task_id, (name, kind, start) in now[:most]]

    def drain(self) -> list[TaskEvent]:
        """The spans finished since the last drain."""
        out = []
        done = self._done
        while True:
            try:
                out.append(done.popleft())
            except IndexError:
                return out


#: this process's recorder (one worker per process)
recorder = EventRecorder()
