"""TaskError: a remote task's exception, re-raised on `get` as an instance of the user's class.

`get` raises an object that is both a `TaskError` (Ray: RayTaskError) and an instance of the
original exception's class, carrying the remote traceback text, so `except ValueError:` works
in the caller exactly as it would have in the task.
"""

from __future__ import annotations

import traceback
from typing import Any

from zmesh.errors import ZmeshError

_derived: dict[type, type] = {}


class TaskError(ZmeshError):
    """A task or actor method raised; `cause` is the original exception."""

    def __init__(self, function_name: str, traceback_str: str, cause: BaseException | None,
                 pid: int = 0) -> None:
        self.function_name = function_name
        self.traceback_str = traceback_str
        self.cause = cause
        self.pid = pid
        super().__init__(self._message())

    def _message(self) -> str:
        where = f" (pid={self.pid})" if self.pid else ""
        return f"task {self.function_name}{where} raised:\n{self.traceback_str.rstrip()}"

    def __str__(self) -> str:
        return self._message()

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self.function_name, self.traceback_str, self.cause, self.pid))

    def as_instanceof_cause(self) -> BaseException:
        """An exception that is both this TaskError and an instance of the cause's class."""
        cause = self.cause
        if cause is None or isinstance(cause, TaskError):
            return self
        cls = type(cause)
        derived = _derived.get(cls)
        if derived is None:
            try:
                derived = type(f"TaskError({cls.__name__})", (TaskError, cls), {})  # type: ignore[call-overload]
                derived.__module__ = "zmesh.exceptions"
            except TypeError:  # a class that cannot be subclassed (final, layout conflict)
                return self
            _derived[cls] = derived
        err = derived.__new__(derived)
        try:
            err.__dict__.update(getattr(cause, "__dict__", {}))
        except Exception:
            pass
        err.args = cause.args
        TaskError.__init__(err, self.function_name, self.traceback_str, cause, self.pid)
        err.args = cause.args
        return err  # type: ignore[no-any-return]


def _rebuild(function_name: str, tb: str, cause: BaseException | None, pid: int) -> TaskError:
    return TaskError(function_name, tb, cause, pid)


def capture(function_name: str, exc: BaseException, pid: int) -> TaskError:
    """Wrap an exception raised by user code, with its formatted traceback."""
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    if isinstance(exc, TaskError):  # a nested task failed: keep its chain readable
        return TaskError(function_name, tb, exc.cause, pid)
    return TaskError(function_name, tb, exc, pid)
