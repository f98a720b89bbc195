"""Streaming generators, owner side: `ObjectRefGenerator` and `num_returns="dynamic"`.

A task or actor method that yields sends each item to its owner as it is made
(`GeneratorItem`, the value of object `index + 1` of the task); object 0 of the task
completes last with the number of items (or the system error that ended the task).
The owner makes a ref for each item as it arrives and hands them out in order, so
`next(gen)` returns as soon as the next item exists. Items are counted, not ordered by
arrival: they may overtake the completion, and a retried task's repeats are ignored.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from zmesh.object_ref import ObjectRef
from zmesh.protocol.messages import runtime as m
from zmesh.runtime import values
from zmesh.runtime.ids import IdGen

if TYPE_CHECKING:
    from zmesh.runtime.owner.client import CoreClient

STREAMING = -1  # num_returns on the wire: items are streamed to the owner
DYNAMIC = -2  # streamed, and return 0 is a DynamicObjectRefGenerator of them all


def wire_num_returns(value: Any, fn: Any) -> int:
    """The wire form of a `num_returns` option; generator functions stream by default."""
    import inspect

    if value is None:
        gen = inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn)
        return STREAMING if gen else 1
    if value == "streaming":
        return STREAMING
    if value == "dynamic":
        return DYNAMIC
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"num_returns must be an int >= 0, 'streaming' or 'dynamic', "
                         f"got {value!r}")
    return value


def backpressure_of(opts: dict[str, Any]) -> int:
    """`_generator_backpressure_num_objects`: -1/None/0 (Ray's "off") -> 0."""
    value = opts.get("_generator_backpressure_num_objects")
    if value is None or value == -1:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"_generator_backpressure_num_objects must be an int > 0 or -1, "
                         f"got {value!r}")
    return value


class _Stream:
    """What the owner knows of one generator task; items are added on the loop thread."""

    def __init__(self, client: CoreClient, task_id: bytes, completion: ObjectRef,
                 backpressure: int, dynamic: bool) -> None:
        self.client = client
        self.task_id = task_id
        self.completion = completion
        self.backpressure = backpressure
        self.dynamic = dynamic
        self.items: dict[int, ObjectRef] = {}
        self.next = 0  # index of the next item to hand out
        self.count: int | None = None  # known once the task completed
        self.failed = False  # the task ended with a system error (returned as the last ref)
        self.error_given = False
        self.worker = ""
        self.cond = threading.Condition()
        self.waiters: list[Future[None]] = []

    # -- loop thread -----------------------------------------------------------------------
    def add(self, start: int, values_: list[m.Value], worker: str,
            take_refs: Callable[[], None] | None = None) -> None:
        """Items start, start + 1, ... arrived (loop thread). `take_refs` takes over the refs
        inside them once the items are tracked, before any user thread can see them: one
        that read an item and dropped it first would have them refused, though the value
        it read holds them."""
        client = self.client
        with self.cond:
            if worker:
                self.worker = worker
            fresh: dict[int, ObjectRef] = {}
            for index, value in enumerate(values_, start):
                oid = IdGen.object_id(self.task_id, index + 1)
                if index < self.next or index in self.items or index in fresh:
                    _free_copy(client, oid, value)  # a retried task's repeat
                    continue
                fresh[index] = ObjectRef(oid, client.address, client)
                client.objects.set_value(oid, value)
            if take_refs is not None:
                take_refs()
            self.items.update(fresh)
        self._wake()

    def end(self, value: m.Value) -> None:
        with self.cond:
            if value.is_error:
                self.failed = True
                self.count = self._seen() if self.count is None else self.count
            else:
                _local.peek = True
                try:
                    count = values.decode(value, self.client.read)
                except Exception:  # noqa: BLE001 - undecodable: treated as a failure
                    count = None
                finally:
                    _local.peek = False
                if self.dynamic:
                    count = getattr(count, "_count", None)
                if isinstance(count, int):
                    self.count = count
                else:
                    self.failed = True
                    self.count = self._seen()
        self._wake()

    def _seen(self) -> int:
        return max([self.next - 1, *self.items]) + 1

    def _wake(self) -> None:
        with self.cond:
            self.cond.notify_all()
            waiters, self.waiters = self.waiters, []
            if self.dynamic and self.count is not None and len(self.items) >= self.count:
                # every item arrived: the completion's value holds them from now on
                ids = [r.id for r in self.items.values()]
                self.client.objects.hold_contained(self.completion.id, ids)
                self.items.clear()
                _registry(self.client).pop(self.task_id, None)
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    # -- user threads ----------------------------------------------------------------------
    def take(self) -> ObjectRef | None:
        """The next ref if it is here; raises StopIteration at the end; None: not yet."""
        with self.cond:
            ref = self.items.pop(self.next, None)
            if ref is not None:
                self.next += 1
                if self.backpressure and self.worker:
                    self.client.loop.send_threadsafe(self.worker, m.GeneratorAck(
                        task_id=self.task_id, consumed=self.next))
                return ref
            if self.count is not None and self.next >= self.count:
                if self.failed and not self.error_given:
                    self.error_given = True
                    return self.completion  # its get raises the error that ended the task
                raise StopIteration
            return None

    def ready(self) -> bool:
        with self.cond:
            return self.next in self.items or (self.count is not None and self.next >= self.count)

    def waiter(self) -> Future[None]:
        fut: Future[None] = Future()
        with self.cond:
            if self.next in self.items or self.count is not None and self.next >= self.count:
                fut.set_result(None)
            else:
                self.waiters.append(fut)
        return fut


class ObjectRefGenerator:
    """The refs a streaming generator task yields, in order, each as soon as it exists.

    Iterate it (`for ref in gen`, `next(gen)`, `async for ref in gen`); `zmesh.get` each ref.
    An exception raised by the generator comes as one more ref whose get raises it.
    """

    def __init__(self, stream: _Stream) -> None:
        self._stream = stream
        self._generator_ref = stream.completion

    def __iter__(self) -> Iterator[ObjectRef]:
        return self

    def __next__(self) -> ObjectRef:
        return self._next_sync(None)

    def _next_sync(self, timeout_s: float | None = None) -> ObjectRef:
        """The next ref; StopIteration at the end; TimeoutError after timeout_s seconds."""
        stream = self._stream
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with stream.cond:
            while True:
                ref = stream.take()
                if ref is not None:
                    return ref
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError(f"no item from {self!r} within {timeout_s}s")
                stream.cond.wait(left)

    def __aiter__(self) -> AsyncIterator[ObjectRef]:
        return self

    async def __anext__(self) -> ObjectRef:
        stream = self._stream
        while True:
            try:
                ref = stream.take()
            except StopIteration:
                raise StopAsyncIteration from None
            if ref is not None:
                return ref
            import asyncio  # (not at import: `import zmesh` should not pay for asyncio)

            await asyncio.wrap_future(stream.waiter())

    def next_ready(self) -> bool:
        """True when `next()` would not block."""
        return self._stream.ready()

    def is_finished(self) -> bool:
        """True once every item was handed out (next() raises StopIteration)."""
        stream = self._stream
        with stream.cond:
            return (stream.count is not None and stream.next >= stream.count
                    and (not stream.failed or stream.error_given))

    def completed(self) -> ObjectRef:
        """A ref that is ready when the task finished (its get raises a system error)."""
        return self._stream.completion

    def task_id(self) -> bytes:
        return self._stream.task_id

    def __repr__(self) -> str:
        return f"ObjectRefGenerator({self._stream.task_id.hex()})"

    def __del__(self) -> None:
        stream = getattr(self, "_stream", None)
        if stream is not None and not stream.dynamic:
            client = stream.client
            if not client.closed:
                client.loop.call_soon(_registry(client).pop, stream.task_id, None)

    def __reduce__(self) -> Any:
        raise TypeError("an ObjectRefGenerator cannot be passed to other tasks or actors; "
                        "pass the refs it yields instead")


class DynamicObjectRefGenerator:
    """The value of a `num_returns="dynamic"` task's ref: iterate it for the item refs."""

    def __init__(self, refs: list[ObjectRef]) -> None:
        self._refs = refs

    def __iter__(self) -> Iterator[ObjectRef]:
        return iter(self._refs)

    def __len__(self) -> int:
        return len(self._refs)

    def __repr__(self) -> str:
        return f"DynamicObjectRefGenerator({len(self._refs)} refs)"


class DynamicItems:
    """What a dynamic task returns on the wire: its item count and owner; decodes (in any
    process) to a DynamicObjectRefGenerator of refs to the items."""

    def __init__(self, task_id: bytes, owner: str, count: int) -> None:
        self._task_id = task_id
        self._owner = owner
        self._count = count

    def __reduce__(self) -> Any:
        return (_dynamic_refs, (self._task_id, self._owner, self._count))


def _dynamic_refs(task_id: bytes, owner: str, count: int) -> Any:
    from zmesh.object_ref import _restore_ref

    if getattr(_local, "peek", False):  # the owner's stream reads the count
        return DynamicItems(task_id, owner, count)
    refs = [_restore_ref(IdGen.object_id(task_id, i + 1), owner) for i in range(count)]
    return DynamicObjectRefGenerator(refs)


# -- the per-client registry -----------------------------------------------------------------
_local = threading.local()
_registries: weakref.WeakKeyDictionary[Any, dict[bytes, _Stream]] = weakref.WeakKeyDictionary()
_reg_lock = threading.Lock()


def _registry(client: Any) -> dict[bytes, _Stream]:
    reg = _registries.get(client)
    if reg is None:
        with _reg_lock:
            reg = _registries.get(client)
            if reg is None:
                reg = _registries[client] = {}
                client.loop.on(m.GeneratorItem, lambda s, msg, b: _on_items(
                    client, s, msg.task_id, msg.index, [msg.value], msg))
                client.loop.on(m.GeneratorItems, lambda s, msg, b: _on_items(
                    client, s, msg.task_id, msg.start, msg.values, msg))
    return reg


def _on_items(client: Any, sender: str, task_id: bytes, start: int, values_: list[m.Value],
              msg: m.GeneratorItem | m.GeneratorItems) -> None:
    worker = msg.worker or sender

    def take_refs() -> None:
        # refs inside the items: held while each item lives (refused if it is gone already)
        if msg.lent:
            client.lending.take_lent(worker, task_id, msg.lent, None)
        if msg.contained:
            items = [IdGen.object_id(task_id, i + 1) for i in range(start, start + len(values_))]
            client.hold_returned(worker, items, msg.contained)

    stream = _registry(client).get(task_id)
    if stream is None:  # the generator was dropped: free what the items stored
        for index, value in enumerate(values_, start):
            _free_copy(client, IdGen.object_id(task_id, index + 1), value)
        take_refs()
    else:
        stream.add(start, values_, worker, take_refs if msg.lent or msg.contained else None)


def _free_copy(client: Any, oid: bytes, value: m.Value) -> None:
    if value.loc is not None:
        client.loop.send(client.node_address, m.FreeObjects(object_ids=[oid],
                                                            node=value.loc.node))


def open_stream(client: Any, task_id: bytes, completion: ObjectRef, backpressure: int,
                dynamic: bool) -> _Stream:
    """Register a generator task before it is submitted; its items find it by task id."""
    stream = _Stream(client, task_id, completion, backpressure, dynamic)
    _registry(client)[task_id] = stream

    def ended(value: m.Value) -> None:
        client.loop.call_soon(stream.end, value)  # after the items already received

    client.objects.when_ready(completion.id, ended)
    return stream


def returned(client: Any, num_returns: int, refs: list[ObjectRef], task_id: bytes,
             backpressure: int) -> Any:
    """What `.remote()` returns for a call whose wire num_returns is `num_returns`
    (call it before the call is submitted, so that no item can arrive unregistered)."""
    if num_returns == STREAMING:
        return ObjectRefGenerator(open_stream(client, task_id, refs[0], backpressure, False))
    if num_returns == DYNAMIC:
        open_stream(client, task_id, refs[0], backpressure, True)
        return refs[0]
    if num_returns == 0:  # as Ray: nothing to get (the call still runs, for its effects)
        return None
    return refs[0] if num_returns == 1 else refs


def wait_mixed(client: Any, items: list[Any], num_returns: int, timeout: float | None
               ) -> tuple[list[Any], list[Any]]:
    """`wait` over refs and generators: a generator is ready when `next()` would not block."""
    deadline = None if timeout is None else time.monotonic() + timeout
    refs = [r for r in items if isinstance(r, ObjectRef)]
    client._request_borrowed(refs)
    while True:
        woken = threading.Event()
        wake = _waker(woken)
        for item in items:
            if isinstance(item, ObjectRefGenerator):
                item._stream.waiter().add_done_callback(wake)
            else:
                client.objects.when_ready(item.id, wake)
        ready = [r for r in items if _is_ready(client, r)][:num_returns]
        left = None if deadline is None else deadline - time.monotonic()
        if len(ready) >= num_returns or (left is not None and left <= 0):
            chosen = {id(r) for r in ready}
            return ready, [r for r in items if id(r) not in chosen]
        woken.wait(left)


def _waker(event: threading.Event) -> Any:
    return lambda _: event.set()


def _is_ready(client: Any, item: Any) -> bool:
    if isinstance(item, ObjectRefGenerator):
        return item.next_ready()
    return client.objects.value_of(item.id) is not None
