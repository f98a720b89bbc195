"""The client's object table: the shell around the ownership core (`zmesh.core.ownership`).

The core decides when an object is released and what a failed read means; this table keeps
what the core does not (values, callbacks waiting for them, lineage) and serializes the two
threads that touch it (user threads making and dropping refs, the loop thread) under one
lock. Released objects go to `on_free(id, entry)` on the loop.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from zmesh.core.exhaustive import assert_never
from zmesh.core.ownership import (
    AckNote,
    Action,
    AddBorrower,
    AskBorrower,
    Escaped,
    Event,
    FailBorrowed,
    Free,
    HandOff,
    HoldBorrowed,
    HoldContained,
    LostBorrowed,
    NoteBorrow,
    Ownership,
    ProbeOwner,
    Record,
    RefuseBorrow,
    ReleaseLender,
    RemoveBorrower,
    SendAnswer,
    TakeReturned,
    Verdict,
)
from zmesh.protocol.messages.runtime import Value

Callback = Callable[[Value], None]


class ObjectEntry(Record, eq=False):  # (compared and hashed by identity)
    """One object as this process sees it: the core's counts (it is the core's record: the
    core makes its records of this class) plus the shell's value, waiters and lineage."""

    value: Value | None = None
    callbacks: list[Callback] | None = None  # made by the first waiter
    requested: bool = False
    lineage: Any = None  # the task that made this (stored) value, to make it again


class ObjectTable:
    """Reference counts and values; `on_free(id, entry)` runs on the loop when one is released.
    The core's other actions (owner probes, verdicts, failed borrows) are returned by
    `handle` for the caller to carry out."""

    def __init__(self, address: str, post: Callable[..., None],
                 on_free: Callable[[bytes, ObjectEntry], None]) -> None:
        self.address = address
        # Reentrant: ObjectRef.__del__ may run (from the garbage collector) inside any
        # allocation made while this lock is held, and it takes the lock again to decref.
        self.lock = threading.RLock()
        self.core = Ownership(address, record=ObjectEntry)
        self.entries: dict[bytes, ObjectEntry] = {}
        self._post = post
        self._on_free = on_free
        # whether a freed object's `on_free` has anything to do (else the loop is not woken:
        # most refs are owned small values that need nothing when they go)
        self.free_needs_loop: Callable[[bytes, ObjectEntry], bool] = lambda oid, entry: True

    def handle(self, event: Event) -> list[Action]:
        """Feed the core one event and carry out its actions; returns them too."""
        with self.lock:
            actions = self.core.handle(event)
            if isinstance(event, TakeReturned):  # it may make records (borrowed refs)
                self._adopt(event.inner)
            if not actions:
                return actions
            freed = self._drop_freed(actions)
        self._post_freed(freed)
        return actions

    def _drop_freed(self, actions: list[Action]) -> list[tuple[bytes, ObjectEntry]]:
        """The entries of the objects the core freed, taken out of the table (lock held)."""
        freed: list[tuple[bytes, ObjectEntry]] = []
        for action in actions:
            match action:
                case Free(oid):
                    entry = self.entries.pop(oid, None)
                    if entry is not None:  # (its `held` is the Free's: it is the record)
                        freed.append((oid, entry))
                case (RefuseBorrow() | FailBorrowed() | ProbeOwner() | Verdict() | HandOff()
                      | ReleaseLender() | NoteBorrow() | SendAnswer() | AckNote()
                      | AskBorrower() | LostBorrowed()):
                    pass  # the caller's to carry out
                case _:
                    assert_never(action)
        return freed

    def _post_freed(self, freed: list[tuple[bytes, ObjectEntry]]) -> None:
        """Hand the freed objects that need it to `on_free` on the loop (lock not held)."""
        for oid, entry in freed:
            if self.free_needs_loop(oid, entry):  # most refs are owned inline values
                self._post(self._on_free, oid, entry)

    # -- counting --------------------------------------------------------------------------
    def incref(self, object_id: bytes, owner: str) -> None:
        with self.lock:
            record = self.core.add_local(object_id, owner)
            if record is not None:  # a new one: the core made it an ObjectEntry
                self.entries[object_id] = record  # type: ignore[assignment]

    def decref(self, object_id: bytes) -> None:
        with self.lock:
            actions = self.core.release_local(object_id)
            if actions is True:  # the common case: only it is freed (no list made for it)
                entry = self.entries.pop(object_id, None)
                if entry is None:
                    return
            elif not actions:
                return
            else:
                entry, freed = None, self._drop_freed(actions)
        if entry is None:
            self._post_freed(freed)
        elif self.free_needs_loop(object_id, entry):  # most refs are owned inline values
            self._post(self._on_free, object_id, entry)

    def add_submitted(self, object_ids: Sequence[bytes]) -> None:
        with self.lock:
            self.core.add_submitted(tuple(object_ids))

    def remove_submitted(self, object_ids: Sequence[bytes]) -> None:
        with self.lock:
            actions = self.core.remove_submitted(tuple(object_ids))
            if not actions:
                return
            freed = self._drop_freed(actions)
        self._post_freed(freed)

    def add_borrower(self, object_ids: Sequence[bytes], borrower: str) -> None:
        self.handle(AddBorrower(tuple(object_ids), borrower))

    def remove_borrower(self, object_ids: Sequence[bytes], borrower: str) -> None:
        self.handle(RemoveBorrower(tuple(object_ids), borrower))

    def hold_contained(self, object_id: bytes, inner_ids: Sequence[bytes]) -> None:
        """The value of `object_id` holds refs to `inner_ids`: keep them while it lives."""
        self.handle(HoldContained(object_id, tuple(inner_ids)))

    def hold_borrowed(self, outer_ids: Sequence[bytes], inner_ids: Sequence[bytes],
                      owner: str) -> tuple[bytes, ...]:
        """Borrow `owner`'s objects inner_ids for as long as any live outer object lives;
        if none of the outer objects is held any more, nothing is borrowed: the ids returned
        are those we then hold no other way (the owner must stop counting us for them)."""
        with self.lock:
            actions = self.core.handle(HoldBorrowed(tuple(outer_ids), tuple(inner_ids), owner))
            for action in actions:
                if isinstance(action, RefuseBorrow):
                    return action.inner
            self._adopt(inner_ids)
        return ()

    def _adopt(self, object_ids: Sequence[bytes]) -> None:
        """Enter records the core made for `object_ids` in the table (lock held)."""
        records = self.core.records
        for oid in object_ids:
            if oid not in self.entries and oid in records:
                self.entries[oid] = records[oid]  # type: ignore[assignment]

    def mark_escaped(self, object_ids: Sequence[bytes]) -> None:
        """A ref left in a return value: keep the object for whoever receives it."""
        self.handle(Escaped(tuple(object_ids)))

    # -- values ----------------------------------------------------------------------------
    def set_value(self, object_id: bytes, value: Value) -> ObjectEntry | None:
        """Record a value; wakes getters and runs callbacks. None if nobody holds the object."""
        with self.lock:
            entry = self.entries.get(object_id)
            if entry is None or entry.value is not None:
                return None
            entry.value = value
            callbacks, entry.callbacks = entry.callbacks, None
        if callbacks:
            for cb in callbacks:
                cb(value)
        return entry

    def value_of(self, object_id: bytes) -> Value | None:
        entry = self.entries.get(object_id)
        return None if entry is None else entry.value

    def when_ready(self, object_id: bytes, callback: Callback) -> bool:
        """Run callback(value) when ready (now, if it is). False if the object is unknown."""
        with self.lock:
            entry = self.entries.get(object_id)
            if entry is None:
                return False
            value = entry.value
            if value is None:
                if entry.callbacks is None:
                    entry.callbacks = [callback]
                else:
                    entry.callbacks.append(callback)
                return True
        callback(value)
        return True
