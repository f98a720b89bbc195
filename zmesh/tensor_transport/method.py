"""`@method(tensor_transport=...)`: wrap an actor method so that its result's tensors stay
in the actor and its ref carries a descriptor (sync and async methods alike)."""

from __future__ import annotations

import functools
import inspect
from typing import Any

from zmesh.tensor_transport.value import keep


def with_tensor_transport(fn: Any, backend: str) -> Any:
    """`fn`, returning `keep(result)` instead of `result`."""
    name = getattr(fn, "__qualname__", getattr(fn, "__name__", "method"))
    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def run_async(*args: Any, **kwargs: Any) -> Any:
            return keep(await fn(*args, **kwargs), backend, f"{name} (pid {_pid()})")

        return run_async

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        return keep(fn(*args, **kwargs), backend, f"{name} (pid {_pid()})")

    return run


def _pid() -> int:
    import os

    return os.getpid()
