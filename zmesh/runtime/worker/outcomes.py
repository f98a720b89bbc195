"""What a worker's run of a task or call turns into besides its return values: the error
value a caller receives (a cancel as TaskCancelledError, anything else captured with its
traceback), and the task's environment variables, switched per task.

Kept apart from `executor` (which decides when each applies) so that module stays about
running work, not encoding its failures.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from zmesh.errors import TaskCancelledError, TaskInterrupt
from zmesh.protocol.messages import runtime as m
from zmesh.runtime import values
from zmesh.runtime.worker import events
from zmesh.task_error import capture

__all__ = ["apply_env", "cancelled_value", "error_value", "switch_env"]

def error_value(name: str, exc: BaseException, pid: int, refs: list[Any] | None = None
                ) -> m.Value:
    """The error a caller receives; with `refs`, the ObjectRefs the error holds go there."""
    events.recorder.note_error(f"{type(exc).__name__}: {exc}")
    if isinstance(exc, TaskCancelledError | TaskInterrupt | asyncio.CancelledError):
        return values.encode_error(TaskCancelledError(f"task {name} was cancelled"))
    return values.encode_error(capture(name, exc, pid), refs)


def cancelled_value(name: str) -> m.Value:
    return values.encode_error(TaskCancelledError(f"task {name} was cancelled"))


def apply_env(env: dict[str, str]) -> None:
    os.environ.update(env)


def switch_env(saved: dict[str, str | None], env: dict[str, str]) -> None:
    """Make os.environ the worker's own plus `env`. `saved` holds the worker's own values of
    the variables the previous task's env changed (updated here): a variable every task sets
    to the same value (OMP_NUM_THREADS) is set once, not set and removed per task."""
    environ = os.environ
    for k in [k for k in saved if k not in env]:
        old = saved.pop(k)
        if old is None:
            environ.pop(k, None)
        else:
            environ[k] = old
    for k, v in env.items():
        current = environ.get(k)
        if current != v:
            if k not in saved:
                saved[k] = current
            environ[k] = v
