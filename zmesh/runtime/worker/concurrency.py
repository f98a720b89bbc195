"""Concurrency groups of an actor: each group runs at most its own number of calls at once.

`@remote(concurrency_groups={"io": 2, "compute": 4})` names the groups; a method joins one
with `@method(concurrency_group="io")` and a call can pick one with
`.options(concurrency_group=...)`. Methods in no group share the default group, whose size
is the actor's max_concurrency. A threaded actor gets a thread pool per group, an async actor
a semaphore per group on its event loop, so a busy group never holds up another.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from zmesh.protocol.messages import runtime as m

DEFAULT = "_ray_system_default"  # not a name a user can give a group


class ConcurrencyGroups:
    """The groups of one actor instance (built once the instance exists)."""

    def __init__(self, cls: type, groups: dict[str, int], default_size: int,
                 is_async: bool) -> None:
        for name, size in groups.items():
            if not isinstance(size, int) or size < 1:
                raise ValueError(f"concurrency group {name!r} must allow at least 1 call, "
                                 f"got {size!r}")
        self.cls = cls
        self.sizes = {**groups, DEFAULT: max(1, default_size)}
        self.is_async = is_async
        self._method_groups: dict[str, str] = {}
        self._pools: dict[str, ThreadPoolExecutor] = {}
        self._sems: dict[str, asyncio.Semaphore] = {}

    def group_of(self, call: m.ActorCall) -> str:
        """The group a call runs in; ValueError for a group the actor does not have."""
        name = call.concurrency_group
        if not name:
            name = self._method_groups.get(call.method, "")
            if not name and call.method not in self._method_groups:
                fn = getattr(self.cls, call.method, None)
                name = self._method_groups[call.method] = str(
                    getattr(fn, "__zmesh_concurrency_group__", "") or "")
        if not name:
            return DEFAULT
        if name not in self.sizes:
            known = ", ".join(repr(g) for g in self.sizes if g != DEFAULT)
            raise ValueError(f"{self.cls.__name__}.{call.method}: no concurrency group "
                             f"{name!r} (the actor has {known or 'none'})")
        return name

    # -- threaded actors (loop thread) -----------------------------------------------------
    def submit(self, run: Callable[[m.ActorCall], Any], call: m.ActorCall,
               reject: Callable[[m.ActorCall, BaseException], Any]) -> None:
        """Run `run(call)` in its group's pool; `reject(call, error)` for an unknown group."""
        try:
            group = self.group_of(call)
        except ValueError as exc:
            reject(call, exc)
            return
        pool = self._pools.get(group)
        if pool is None:
            pool = self._pools[group] = ThreadPoolExecutor(
                self.sizes[group], thread_name_prefix=f"zmesh-group-{group}")
        pool.submit(run, call)

    # -- async actors (the actor's event loop) ---------------------------------------------
    def semaphore(self, call: m.ActorCall) -> asyncio.Semaphore:
        """The semaphore of the call's group (made on first use, on the actor's loop)."""
        group = self.group_of(call)
        sem = self._sems.get(group)
        if sem is None:
            sem = self._sems[group] = asyncio.Semaphore(self.sizes[group])
        return sem
