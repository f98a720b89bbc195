"""TaskError: a remote task's exception, re-raised on `get` as an instance of the user's class.

`get` raises an object that is both a `TaskError` (Ray: RayTaskError) and an instance of the
original exception's class, carrying the remote traceback text, so `except ValueError:` works
in the caller exactly as it would have in the task.
"""

from __future__ import annotations

import traceback
from typing import Any

from zmesh.errors import ActorDiedError, ZmeshError

_derived: dict[tuple[type, type], type] = {}


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
        cls, base = type(cause), type(self)
        derived = _derived.get((base, cls))
        if derived is None:
            try:
                # Ray's name for the class: `RayTaskError(ValueError)`
                shown = "RayTaskError" if base is TaskError else base.__name__
                derived = type(f"{shown}({cls.__name__})", (base, cls), {})
                derived.__module__ = "zmesh.exceptions"
            except TypeError:  # a class that cannot be subclassed (final, layout conflict)
                return self
            _derived[(base, cls)] = derived
        made: Any = derived
        try:
            err = made.__new__(made)
        except TypeError:  # MemoryError and kin refuse a derived __new__: carry the cause
            return self
        try:
            err.__dict__.update(getattr(cause, "__dict__", {}))
        except Exception:
            pass
        # copy our fields: TaskError.__init__ would reach the user class's __init__ via super()
        err.__dict__.update(self.__dict__)
        err.args = cause.args
        return err  # type: ignore[no-any-return]


class ActorInitError(TaskError, ActorDiedError):
    """An actor's `__init__` raised: the actor is dead, and its calls re-raise the original
    exception (`get` raises an instance of the user's class that is also an ActorDiedError)."""

    def __init__(self, death: str, function_name: str, traceback_str: str,
                 cause: BaseException | None, pid: int = 0) -> None:
        self.death = death
        super().__init__(function_name, traceback_str, cause, pid)

    def _message(self) -> str:
        return f"{self.death}\n{self.traceback_str.rstrip()}"

    def __reduce__(self) -> tuple[Any, ...]:
        return (ActorInitError, (self.death, self.function_name, self.traceback_str, self.cause,
                                 self.pid))


def _rebuild(function_name: str, tb: str, cause: BaseException | None, pid: int) -> TaskError:
    return TaskError(function_name, tb, cause, pid)


def capture(function_name: str, exc: BaseException, pid: int) -> TaskError:
    """Wrap an exception raised by user code, with its formatted traceback."""
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    if isinstance(exc, TaskError):  # a nested task failed: keep its chain readable
        return TaskError(function_name, tb, exc.cause, pid)
    return TaskError(function_name, tb, exc, pid)
