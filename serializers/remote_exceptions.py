"""Pickling exceptions with their tracebacks, causes and contexts.

Plain pickle drops `__traceback__`, `__cause__` and `__context__`. Traceback objects cannot
be pickled, so the formatted traceback text travels instead and is kept on the rebuilt
exception as `remote_traceback` (read it with `remote_traceback(exc)`); the chained
exceptions travel as exceptions.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

#: Attribute on a rebuilt exception holding the sender's formatted traceback.
REMOTE_TRACEBACK_ATTR = "remote_traceback"


def remote_traceback(exc: BaseException) -> str | None:
    """The traceback text an exception carried from the process that raised it, if any."""
    text = getattr(exc, REMOTE_TRACEBACK_ATTR, None)
    return text if isinstance(text, str) else None


def _traceback_text(exc: BaseException) -> str | None:
    if exc.__traceback__ is None:
        return remote_traceback(exc)
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, chain=False))
    earlier = remote_traceback(exc)
    return text if earlier is None else f"{earlier}\n(re-raised)\n{text}"


def reduce_exception(exc: BaseException) -> tuple[Callable[..., BaseException], tuple[Any, ...]]:
    """A pickle reduce tuple that rebuilds `exc` with traceback text, cause and context."""
    reduced = exc.__reduce_ex__(5)
    if isinstance(reduced, str) or len(reduced) < 2:
        raise TypeError(f"{type(exc).__qualname__}.__reduce_ex__ returned {reduced!r}")
    rebuild, args = reduced[0], reduced[1]
    state = reduced[2] if len(reduced) > 2 else None
    return _rebuild_exception, (
        rebuild,
        args,
        state,
        _traceback_text(exc),
        exc.__cause__,
        exc.__context__,
        exc.__suppress_context__,
    )


def _rebuild_exception(
    rebuild: Callable[..., BaseException],
    args: tuple[Any, ...],
    state: Any,
    traceback_text: str | None,
    cause: BaseException | None,
    context: BaseException | None,
    suppress_context: bool,
) -> BaseException:
    try:
        exc = rebuild(*args)
    except TypeError:
        # The default reduce calls cls(*self.args), which fails for classes whose __init__
        # takes other arguments; build the instance without __init__, then restore its state.
        if not (isinstance(rebuild, type) and issubclass(rebuild, BaseException)):
            raise
        exc = rebuild.__new__(rebuild, *args)
        exc.args = tuple(args)
    if state:
        setstate = getattr(exc, "__setstate__", None)
        if setstate is not None:
            setstate(state)
        elif isinstance(state, dict):
            exc.__dict__.update(state)
    exc.__cause__ = cause
    exc.__context__ = context
    exc.__suppress_context__ = suppress_context
    if traceback_text is not None:
        try:
            setattr(exc, REMOTE_TRACEBACK_ATTR, traceback_text)
        except AttributeError:  # __slots__ without __dict__: keep the exception, lose the text
            pass
    return exc
