"""Streaming generators, worker side: send each yielded item to the owner as it is made.

Item `i` is the value of object `i + 1` of the task; the task's own return (object 0) is the
number of items, or for `num_returns="dynamic"` a value that decodes to refs to all of them.
An exception raised by the generator becomes one more item (an error value) and ends it.
With backpressure, the generator pauses once `backpressure` items are unconsumed, until the
owner acknowledges (GeneratorAck) that it took some.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from zmesh.generators import DYNAMIC, DynamicItems
from zmesh.protocol.messages import runtime as m
from zmesh.runtime.ids import IdGen
from zmesh.runtime.worker.outcomes import error_value

ErrorOf = Callable[[BaseException, "list[Any] | None"], m.Value]
"""The error value of an exception; the ObjectRefs inside it go to the list given."""


class _Pace:
    """How many items the owner consumed, for a generator paused by backpressure."""

    def __init__(self) -> None:
        self.consumed = 0
        self.cond = threading.Condition()
        self.aio: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    def ack(self, consumed: int) -> None:
        with self.cond:
            self.consumed = max(self.consumed, consumed)
            self.cond.notify_all()
            waiters, self.aio = self.aio, []
        for loop, fut in waiters:
            loop.call_soon_threadsafe(_settle, fut)

    def wait_room(self, produced: int, limit: int) -> None:
        with self.cond:
            while produced - self.consumed >= limit:
                # wakes at least every second, so that a cancel (an async exception) lands
                self.cond.wait(1.0)

    async def wait_room_async(self, produced: int, limit: int) -> None:
        loop = asyncio.get_running_loop()
        while True:
            with self.cond:
                if produced - self.consumed < limit:
                    return
                fut: asyncio.Future[None] = loop.create_future()
                self.aio.append((loop, fut))
            await fut


def _settle(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


_paces: dict[bytes, _Pace] = {}
_registered: set[int] = set()
_lock = threading.Lock()


def _pace(client: Any, task_id: bytes) -> _Pace:
    with _lock:
        if id(client) not in _registered:
            _registered.add(id(client))
            client.loop.on(m.GeneratorAck, _on_ack)
        pace = _paces[task_id] = _Pace()
    return pace


def _on_ack(sender: str, msg: m.GeneratorAck, bufs: list[Any]) -> None:
    pace = _paces.get(msg.task_id)
    if pace is not None:
        pace.ack(msg.consumed)


BATCH_ITEMS = 64  # at most this many items in one message
BATCH_DELAY_S = 0.002  # an item waits at most this long for others to share its message


class _Sender:
    """Encodes and sends the items of one generator.

    An item made more than BATCH_DELAY_S after the last send goes at once (a slow generator's
    items arrive as they are made); items that follow quickly share a message, flushed when
    BATCH_ITEMS are waiting, by a timer after BATCH_DELAY_S, before backpressure blocks, and
    at the end.
    """

    def __init__(self, client: Any, task_id: bytes, owner: str,
                 shield: Callable[[], AbstractContextManager[None]] | None = None) -> None:
        self.shield = shield or contextlib.nullcontext
        self.client = client
        self.task_id = task_id
        self.owner = owner
        self.count = 0  # items handed to the buffer
        self._lock = threading.Lock()
        self._buffer: list[m.Value] = []
        self._lent: list[m.Lent] = []  # refs inside the buffered items (see owner/lending.py)
        self._contained: list[bytes] = []
        self._start = 0  # index of the buffer's first item
        self._last_send = 0.0
        self._timer = False

    def item(self, obj: Any) -> None:
        with self.shield():
            oid = IdGen.object_id(self.task_id, self.count + 1)
            # stored for the owner (as a return is): the node frees it if the owner dies, not
            # when this worker does (the owner's ref to the item outlives us)
            value, nested = self.client.encode(obj, oid, for_owner=self.owner)
            if nested:  # the owner holds them while the item lives: handed over to it
                self._add(value, *self._hand_over(oid, nested))
            else:
                self._add(value)

    def _hand_over(self, oid: bytes, nested: list[Any]) -> tuple[list[bytes], list[m.Lent]]:
        """Ours the owner borrows from us; others' we lend it (one lend per item: their
        owners are told first, and the generator waits until they acknowledged, as a
        task's answer does); both are listed with the item when it goes (in `_add`, in one step
        with it: a flush by the loop's timer in between would list them with the items
        before it, under which the owner would hold them, or refuse them)."""
        me = self.client.address
        mine = [r.id for r in nested if r.owner == me]
        if mine:
            self.client.objects.add_borrower(mine, self.owner)
        lent = [m.Lent(index=self.count + 1, object_id=r.id, owner=r.owner)
                for r in nested if r.owner != me]
        if lent:  # (the owners of others' refs are told first: the item waits for them)
            self.client.lending.lend(self.task_id, 0, lent, self.owner, token=oid, wait=True)
        return mine, lent

    def error(self, exc: BaseException, error_of: ErrorOf) -> None:
        """The last item: the error that ended the generator. The refs inside it are handed
        over as an item's (unsaid, each would be pinned here for good)."""
        refs: list[Any] = []
        value = error_of(exc, refs)
        if refs:
            oid = IdGen.object_id(self.task_id, self.count + 1)
            self._add(value, *self._hand_over(oid, refs))
        else:
            self._add(value)
        self.flush()

    def _add(self, value: m.Value, contained: list[bytes] | None = None,
             lent: list[m.Lent] | None = None) -> None:
        now = time.monotonic()
        with self._lock:
            if not self._buffer:
                self._start = self.count
            self._buffer.append(value)
            if contained:
                self._contained.extend(contained)
            if lent:
                self._lent.extend(lent)
            self.count += 1
            full = len(self._buffer) >= BATCH_ITEMS
            stale = now - self._last_send >= BATCH_DELAY_S
            arm = not (full or stale or self._timer)
            if arm:
                self._timer = True
        if full or stale:
            self.flush()
        elif arm:
            loop = self.client.loop
            loop.call_soon(loop.call_later, BATCH_DELAY_S, self._on_timer)

    def _on_timer(self) -> None:  # loop thread
        with self._lock:
            self._timer = False
        self.flush(on_loop=True)

    def flush(self, on_loop: bool = False) -> None:
        with self._lock:
            values, self._buffer = self._buffer, []
            lent, self._lent = self._lent, []
            contained, self._contained = self._contained, []
            start = self._start
            self._last_send = time.monotonic()
        if not values:
            return
        if len(values) == 1:
            msg: Any = m.GeneratorItem(task_id=self.task_id, index=start, value=values[0],
                                       worker=self.client.address, lent=lent,
                                       contained=contained)
        else:
            msg = m.GeneratorItems(task_id=self.task_id, start=start, values=values,
                                   worker=self.client.address, lent=lent, contained=contained)
        if on_loop:
            self.client.loop.send(self.owner, msg)
        else:
            self.client.send_direct(self.owner, msg)

    def result(self, mode: int) -> list[m.Value]:
        self.flush()
        obj: Any = self.count
        if mode == DYNAMIC:
            obj = DynamicItems(self.task_id, self.owner, self.count)
        value, _ = self.client.encode(obj, IdGen.object_id(self.task_id, 0))
        return [value]


def run(client: Any, task_id: bytes, gen: Any, mode: int, owner: str, backpressure: int,
        error_of: ErrorOf, shield: Callable[[], AbstractContextManager[None]] | None = None
        ) -> list[m.Value]:
    """Iterate a (sync) generator on this thread, streaming its items; the task's returns.

    `shield()` holds off a cancel while an item is sent (it raises the cancel after), so
    that an interrupted send cannot leave the owner waiting for an item that never comes.
    """
    sender = _Sender(client, task_id, owner, shield)
    pace = _pace(client, task_id) if backpressure else None
    try:
        if not hasattr(gen, "__next__"):
            raise TypeError(f"a streaming task must return a generator (yield its items), "
                            f"got {type(gen).__name__}")
        for item in gen:
            sender.item(item)
            if pace is not None and sender.count - pace.consumed >= backpressure:
                with sender.shield():
                    sender.flush()  # the owner can only consume what it has
                pace.wait_room(sender.count, backpressure)
    except BaseException as exc:  # noqa: BLE001 - user code may raise anything
        sender.error(exc, error_of)
    finally:
        if pace is not None:
            _paces.pop(task_id, None)
    return sender.result(mode)


async def run_async(client: Any, task_id: bytes, agen: Any, mode: int, owner: str,
                    backpressure: int, error_of: ErrorOf) -> list[m.Value]:
    """Iterate an async generator on the actor's event loop, streaming its items."""
    sender = _Sender(client, task_id, owner)
    pace = _pace(client, task_id) if backpressure else None
    try:
        async for item in agen:
            sender.item(item)
            if pace is not None and sender.count - pace.consumed >= backpressure:
                sender.flush()
                await pace.wait_room_async(sender.count, backpressure)
    except BaseException as exc:  # noqa: BLE001 - user code may raise anything
        sender.error(exc, error_of)
    finally:
        if pace is not None:
            _paces.pop(task_id, None)
    return sender.result(mode)


def run_task(client: Any, pid: int, shielded: Callable[[], AbstractContextManager[None]],
             task_id: bytes, gen: Any, mode: int, name: str, owner: str,
             backpressure: int) -> list[m.Value]:
    """Stream a task's (or a sync call's) generator, sync or async, from a worker thread."""
    def error_of(exc: BaseException, refs: list[Any] | None = None) -> m.Value:
        return error_value(name, exc, pid, refs)

    if hasattr(gen, "__anext__"):  # an async generator outside an async actor
        return asyncio.run(run_async(client, task_id, gen, mode, owner, backpressure, error_of))
    return run(client, task_id, gen, mode, owner, backpressure, error_of, shielded)


async def run_call_async(client: Any, pid: int,
                         shielded: Callable[[], AbstractContextManager[None]], call: m.ActorCall,
                         name: str, method: Any, args: Any, kwargs: Any) -> list[m.Value]:
    """Stream an async actor's generator method (a sync one runs on the default executor)."""
    def error_of(exc: BaseException, refs: list[Any] | None = None) -> m.Value:
        return error_value(name, exc, pid, refs)

    if inspect.isasyncgenfunction(method):
        return await run_async(client, call.task_id, method(*args, **kwargs), call.num_returns,
                               call.caller, call.backpressure, error_of)
    return await asyncio.get_running_loop().run_in_executor(
        None, lambda: run_task(client, pid, shielded, call.task_id, method(*args, **kwargs),
                               call.num_returns, name, call.caller, call.backpressure))
