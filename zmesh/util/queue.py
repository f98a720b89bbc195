"""An actor-backed FIFO queue shared by tasks and actors, as Ray's `ray.util.queue.Queue`.

The queue lives in an async actor holding an `asyncio.Queue`; blocking `put`/`get` wait in
the actor (with `timeout`) without holding a thread, and `Full`/`Empty` are raised as the
stdlib's `queue.Full`/`queue.Empty` subclasses.
"""

from __future__ import annotations

import asyncio
import queue
from collections.abc import Iterable
from typing import Any

import zmesh


class Empty(queue.Empty):
    """get() found the queue empty (no wait, or the timeout passed)."""


class Full(queue.Full):
    """put() found the queue full (no wait, or the timeout passed)."""


class _QueueActor:
    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self.queue: asyncio.Queue[Any] = asyncio.Queue(maxsize)

    async def qsize(self) -> int:
        return self.queue.qsize()

    async def empty(self) -> bool:
        return self.queue.empty()

    async def full(self) -> bool:
        return self.queue.full()

    async def put(self, item: Any, timeout: float | None = None) -> None:
        if not self.queue.full():  # the common case: no task, no timer
            self.queue.put_nowait(item)
            return
        if timeout is None:
            await self.queue.put(item)
            return
        try:
            await asyncio.wait_for(self.queue.put(item), timeout)
        except asyncio.TimeoutError:
            raise Full from None

    async def get(self, timeout: float | None = None) -> Any:
        if not self.queue.empty():  # the common case: no task, no timer
            return self.queue.get_nowait()
        if timeout is None:
            return await self.queue.get()
        try:
            return await asyncio.wait_for(self.queue.get(), timeout)
        except asyncio.TimeoutError:
            raise Empty from None

    async def put_nowait(self, item: Any) -> None:
        try:
            self.queue.put_nowait(item)
        except asyncio.QueueFull:
            raise Full from None

    async def put_nowait_batch(self, items: list[Any]) -> None:
        if self.maxsize > 0 and len(items) + self.queue.qsize() > self.maxsize:
            raise Full(f"Cannot add {len(items)} items to queue of size {self.queue.qsize()} "
                       f"and maxsize {self.maxsize}.")
        for item in items:
            self.queue.put_nowait(item)

    async def get_nowait(self) -> Any:
        try:
            return self.queue.get_nowait()
        except asyncio.QueueEmpty:
            raise Empty from None

    async def get_nowait_batch(self, num_items: int) -> list[Any]:
        if num_items > self.queue.qsize():
            raise Empty(f"Cannot get {num_items} items from queue of size "
                        f"{self.queue.qsize()}.")
        return [self.queue.get_nowait() for _ in range(num_items)]


class Queue:
    """A FIFO queue any task or actor can use: pass it (it pickles as its actor handle)."""

    def __init__(self, maxsize: int = 0, actor_options: dict[str, Any] | None = None) -> None:
        from zmesh.api import remote

        options = {"num_cpus": 0, **(actor_options or {})}
        self.maxsize = maxsize
        self.actor = remote(_QueueActor).options(**options).remote(maxsize)

    def __len__(self) -> int:
        return self.size()

    def size(self) -> int:
        """The number of items in the queue."""
        return int(zmesh.get(self.actor.qsize.remote()))

    def qsize(self) -> int:
        """The number of items in the queue."""
        return self.size()

    def empty(self) -> bool:
        """Whether the queue is empty."""
        return bool(zmesh.get(self.actor.empty.remote()))

    def full(self) -> bool:
        """Whether the queue is full."""
        return bool(zmesh.get(self.actor.full.remote()))

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        """Add an item; blocks while full (up to timeout, then Full) unless block=False."""
        if not block:
            self.put_nowait(item)
            return
        _check_timeout(timeout)
        zmesh.get(self.actor.put.remote(item, timeout))

    async def put_async(self, item: Any, block: bool = True,
                        timeout: float | None = None) -> None:
        """put() for asyncio code: awaits instead of blocking the thread."""
        # the refs are held in locals while awaited: an unkept ref could be freed meanwhile
        if not block:
            ref = self.actor.put_nowait.remote(item)
        else:
            _check_timeout(timeout)
            ref = self.actor.put.remote(item, timeout)
        await ref

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        """Remove and return an item; blocks while empty (up to timeout, then Empty)."""
        if not block:
            return self.get_nowait()
        _check_timeout(timeout)
        return zmesh.get(self.actor.get.remote(timeout))

    async def get_async(self, block: bool = True, timeout: float | None = None) -> Any:
        """get() for asyncio code."""
        if not block:
            ref = self.actor.get_nowait.remote()
        else:
            _check_timeout(timeout)
            ref = self.actor.get.remote(timeout)
        return await ref

    def put_nowait(self, item: Any) -> None:
        """put(item, block=False): Full at once if the queue is full."""
        zmesh.get(self.actor.put_nowait.remote(item))

    def put_nowait_batch(self, items: Iterable[Any]) -> None:
        """Add all items at once, or none (Full) if they do not all fit."""
        zmesh.get(self.actor.put_nowait_batch.remote(list(items)))

    def get_nowait(self) -> Any:
        """get(block=False): Empty at once if the queue is empty."""
        return zmesh.get(self.actor.get_nowait.remote())

    def get_nowait_batch(self, num_items: int) -> list[Any]:
        """Remove num_items items at once, or none (Empty) if there are fewer."""
        if not isinstance(num_items, int) or num_items < 0:
            raise ValueError("'num_items' must be a nonnegative integer")
        return list(zmesh.get(self.actor.get_nowait_batch.remote(num_items)))

    def shutdown(self, force: bool = False, grace_period_s: int = 5) -> None:
        """Kill the queue's actor; the queue cannot be used afterwards."""
        if self.actor is not None:
            zmesh.kill(self.actor)
        self.actor = None


def _check_timeout(timeout: float | None) -> None:
    if timeout is not None and timeout < 0:
        raise ValueError("'timeout' must be a non-negative number")
