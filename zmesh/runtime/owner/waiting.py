"""Waiting for object values in a client: `get`'s wait, `wait`, futures, borrowed fetches.

A user thread registers callbacks on the object table and blocks on one event; the loop's
callbacks count down to it. While a task's thread blocks here its CPU is lent (the client's
`blocked_hook`), and a cancel of the task ends the wait (`interruptible`).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from zmesh.errors import GetTimeoutError, NodeDiedError, ObjectLostError, TaskCancelledError
from zmesh.object_ref import ObjectRef
from zmesh.protocol.messages import runtime as m
from zmesh.runtime import values

if TYPE_CHECKING:
    from zmesh.runtime.owner.client import CoreClient


class Waits:
    """The waiting half of a `CoreClient` (its user threads call in)."""

    def __init__(self, client: CoreClient) -> None:
        self.client = client
        self.interruptible: dict[int, Countdown] = {}  # thread id -> its get/wait, if blocked

    def values(self, refs: Sequence[ObjectRef], deadline: float | None,
               fail_fast: bool = False) -> list[m.Value]:
        """The refs' values once all are ready; with fail_fast, as soon as one is an error
        (the others may then be None)."""
        client = self.client
        objects = client.objects
        entries = objects.entries
        result: list[m.Value | None] = []
        missing: list[int] = []
        borrowed = False
        for i, ref in enumerate(refs):
            entry = entries.get(ref.id)
            v = None if entry is None else entry.value
            result.append(v)
            if v is None:
                missing.append(i)
                if entry is not None and not entry.owned:
                    borrowed = True
        if not missing:
            return result  # type: ignore[return-value]
        if client.node_watch.lost:  # nothing more will come
            raise NodeDiedError(client.node_watch.lost)
        if borrowed:  # (the values of refs we own come to us unasked)
            self.request_borrowed([refs[i] for i in missing])
        waiter = Countdown(len(missing), fail_fast)
        for i in missing:
            if not objects.when_ready(refs[i].id, waiter.hit):
                raise ObjectLostError(f"{refs[i]!r} is no longer referenced by this process")
        if not waiter.event.is_set():
            hook = client.blocked_hook
            if hook is not None:
                hook(True)
            me = threading.get_ident()
            self.interruptible[me] = waiter
            try:
                left = None if deadline is None else max(0.0, deadline - client.loop.clock())
                done = client.loop.wait_event(waiter.event, left)
            finally:
                self.interruptible.pop(me, None)
                if hook is not None:
                    hook(False)
            if waiter.cancelled:
                raise TaskCancelledError("the task was cancelled while blocked in get()")
            if not done:
                late = next(refs[i] for i in missing if objects.value_of(refs[i].id) is None)
                raise GetTimeoutError(self._timeout_message(late))
        for i in missing:
            result[i] = objects.value_of(refs[i].id)
        return result  # type: ignore[return-value]

    def _timeout_message(self, ref: ObjectRef) -> str:
        client = self.client
        why = client.tasks.pending_reason(ref.task_id()) or \
            client.actors.pending_reason(ref.task_id())
        base = f"get timed out waiting for {ref!r}"
        return f"{base}: {why}" if why else base

    def request_borrowed(self, refs: Sequence[ObjectRef]) -> None:
        """Ask the owners of borrowed refs for their values (once per object)."""
        client = self.client
        todo = []
        with client.objects.lock:
            for ref in refs:
                entry = client.objects.entries.get(ref.id)
                if entry is not None and not entry.owned and not entry.requested:
                    entry.requested = True
                    todo.append(ref)
        by_owner: dict[str, list[bytes]] = {}
        for ref in todo:
            client.loop.send_threadsafe(ref.owner, m.GetObject(object_id=ref.id,
                                                               requester=client.address))
            by_owner.setdefault(ref.owner, []).append(ref.id)
        for owner, ids in by_owner.items():  # an owner that died never answers: watch it
            client.loop.call_soon(client.owner_probe.watch, owner, ids)

    def wait(self, refs: Sequence[ObjectRef], num_returns: int, timeout: float | None
             ) -> tuple[list[ObjectRef], list[ObjectRef]]:
        """Split refs into (ready, not ready) once num_returns are ready or time runs out."""
        client = self.client
        self.request_borrowed(refs)
        value_of = client.objects.value_of
        have = sum(1 for r in refs if value_of(r.id) is not None)
        if have < num_returns and timeout != 0:
            # Count every ref through its callback (a ready one calls back at once): counting
            # the ready ones first and registering the rest after would miss a ref that becomes
            # ready in between, and wait forever.
            waiter = Countdown(num_returns)
            for r in refs:
                client.objects.when_ready(r.id, waiter.hit)
            me = threading.get_ident()
            self.interruptible[me] = waiter
            hook = client.blocked_hook if not waiter.event.is_set() else None
            if hook is not None:
                hook(True)  # lend this task's CPU while it waits, as get does (Ray)
            try:
                client.loop.wait_event(waiter.event, timeout)
            finally:
                self.interruptible.pop(me, None)
                if hook is not None:
                    hook(False)
            if waiter.cancelled:
                raise TaskCancelledError("the task was cancelled while blocked in wait()")
        out_ready: list[ObjectRef] = []
        rest: list[ObjectRef] = []
        for r in refs:
            if len(out_ready) < num_returns and value_of(r.id) is not None:
                out_ready.append(r)
            else:
                rest.append(r)
        return out_ready, rest

    def future_of(self, ref: ObjectRef) -> Future[Any]:
        """A future of the ref's value. The pending callback keeps the ref alive: the caller
        may drop it (`await f.remote()` keeps no variable) and the value must still arrive."""
        fut: Future[Any] = Future()
        client = self.client
        read = client.read

        def decode(value: m.Value, keep: ObjectRef) -> None:
            try:
                obj = client.lending.decode(keep, value, read)
                fut.set_result(values.raise_if_error(value, obj))
            except BaseException as exc:
                fut.set_exception(exc)

        def done(value: m.Value, keep: ObjectRef = ref) -> None:
            if value.loc is not None and threading.current_thread() is client.loop.run_thread:
                # The value came later, to the loop thread, and lies in the store: reading it
                # asks the node and waits for the reply, which only this thread receives.
                # Read on the loop, every await of a stored value that was not ready yet
                # (an async actor's or an asyncio driver's) failed after 30 s with "the zmesh
                # node did not answer". A thread of its own reads it.
                threading.Thread(target=decode, args=(value, keep), daemon=True,
                                 name="zmesh-await-read").start()
                return
            decode(value, keep)

        self.request_borrowed([ref])
        if not self.client.objects.when_ready(ref.id, done):
            fut.set_exception(ObjectLostError(f"{ref!r} is no longer referenced"))
        return fut


class Flag:
    """A one-shot event for one waiting thread (what `loop.wait_event` needs): a lock held
    until `set`. A threading.Event builds a Condition and two locks per wait, and its set()
    notifies through them: ~10% of a driver's CPU per synchronous call. Two setters may
    race (a value and a cancel): the lock is released once, the other release is ignored."""

    __slots__ = ("_lock", "_set")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()
        self._set = False

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        if not self._set:
            self._set = True
            try:
                self._lock.release()
            except RuntimeError:  # a racing setter released it (or a waiter took it) first
                pass

    def wait(self, timeout: float | None = None) -> bool:
        if self._set:
            return True
        if self._lock.acquire(True, -1 if timeout is None else
                              min(max(timeout, 0.0), threading.TIMEOUT_MAX)):
            try:
                self._lock.release()  # it stays set: a later wait returns at once
            except RuntimeError:  # a racing second setter released it meanwhile
                pass
            return True
        return self._set


class Countdown:
    """Sets `event` once `hit` has been called `n` times, from any threads (the loop's
    callbacks race the registering thread's immediate ones, hence the lock). One ref
    without fail_fast (a `get` of one ref) needs no count: its one hit sets the event."""

    __slots__ = ("left", "event", "_lock", "_fail_fast", "cancelled")

    def __init__(self, n: int, fail_fast: bool = False) -> None:
        self.left = n
        self.event = Flag()
        self._lock = threading.Lock() if n != 1 or fail_fast else None
        self._fail_fast = fail_fast  # an error value ends the wait at once
        self.cancelled = False

    def cancel(self) -> None:
        """End the wait now: the waiting task was cancelled."""
        self.cancelled = True
        self.event.set()

    def hit(self, value: Any) -> None:
        lock = self._lock
        if lock is None:
            self.event.set()
            return
        with lock:
            self.left -= 1
            if self.left <= 0 or (self._fail_fast and getattr(value, "is_error", False)):
                self.event.set()
