"""The client's object table: values it owns or borrows, and their reference counts.

An owned object lives until its local refs, its borrowers and the tasks using it as an
argument are all gone; then every copy is freed. A borrowed object tells its owner when
this process stops holding it. Both threads touch the table, under one lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from zmesh.protocol.messages.runtime import Value

Callback = Callable[[Value], None]


class ObjectEntry:
    """One object as this process sees it."""

    __slots__ = ("value", "owner", "owned", "local", "borrowers", "submitted", "callbacks",
                 "requested", "escaped", "contained", "held", "lineage")

    def __init__(self, owner: str, owned: bool) -> None:
        self.value: Value | None = None
        self.owner = owner
        self.owned = owned
        self.local = 0
        self.borrowers: set[str] = set()
        self.submitted = 0
        self.callbacks: list[Callback] = []
        self.requested = False
        self.escaped = False
        self.contained: list[bytes] = []  # refs inside this (owned) value, held while it lives
        self.held: list[bytes] = []  # others' objects inside this value, borrowed while it lives
        self.lineage: Any = None  # the task that made this (stored) value, to make it again

    def in_use(self) -> bool:
        return bool(self.local or self.borrowers or self.submitted or self.escaped)


class ObjectTable:
    """Reference counts and values; `on_free(id, entry)` runs on the loop when one is released."""

    def __init__(self, address: str, post: Callable[..., None],
                 on_free: Callable[[bytes, ObjectEntry], None]) -> None:
        self.address = address
        # Reentrant: ObjectRef.__del__ may run (from the garbage collector) inside any
        # allocation made while this lock is held, and it takes the lock again to decref.
        self.lock = threading.RLock()
        self.entries: dict[bytes, ObjectEntry] = {}
        self._post = post
        self._on_free = on_free

    # -- counting --------------------------------------------------------------------------
    def incref(self, object_id: bytes, owner: str) -> None:
        with self.lock:
            entry = self.entries.get(object_id)
            if entry is None:
                entry = self.entries[object_id] = ObjectEntry(owner, owner == self.address)
            entry.local += 1

    def decref(self, object_id: bytes) -> None:
        with self.lock:
            entry = self.entries.get(object_id)
            if entry is None:
                return
            entry.local -= 1
            if entry.in_use():
                return
            del self.entries[object_id]
        self._post(self._on_free, object_id, entry)

    def add_submitted(self, object_ids: list[bytes]) -> None:
        with self.lock:
            for oid in object_ids:
                entry = self.entries.get(oid)
                if entry is not None:
                    entry.submitted += 1

    def remove_submitted(self, object_ids: list[bytes]) -> None:
        self._release(object_ids, lambda e: setattr(e, "submitted", e.submitted - 1))

    def add_borrower(self, object_ids: list[bytes], borrower: str) -> None:
        with self.lock:
            for oid in object_ids:
                entry = self.entries.get(oid)
                if entry is not None:
                    entry.borrowers.add(borrower)

    def remove_borrower(self, object_ids: list[bytes], borrower: str) -> None:
        self._release(object_ids, lambda e: e.borrowers.discard(borrower))

    def hold_contained(self, object_id: bytes, inner_ids: list[bytes]) -> None:
        """The value of `object_id` holds refs to `inner_ids`: keep them while it lives."""
        with self.lock:
            entry = self.entries.get(object_id)
            if entry is None:
                return
            entry.contained = list(inner_ids)
            for oid in inner_ids:
                inner = self.entries.get(oid)
                if inner is not None:
                    inner.submitted += 1

    def hold_borrowed(self, outer_ids: list[bytes], inner_ids: list[bytes], owner: str) -> bool:
        """Borrow `owner`'s objects inner_ids for as long as the first live outer object lives;
        False if none of the outer objects is held any more (then nothing is borrowed)."""
        with self.lock:
            outer = next((self.entries[o] for o in outer_ids if o in self.entries), None)
            if outer is None:
                return False
            for oid in inner_ids:
                entry = self.entries.get(oid)
                if entry is None:
                    entry = self.entries[oid] = ObjectEntry(owner, owner == self.address)
                entry.local += 1
            outer.held = outer.held + list(inner_ids)
        return True

    def mark_escaped(self, object_ids: list[bytes]) -> None:
        """A ref left in a return value: keep the object for whoever receives it."""
        with self.lock:
            for oid in object_ids:
                entry = self.entries.get(oid)
                if entry is not None:
                    entry.escaped = True

    def _release(self, object_ids: list[bytes], change: Callable[[ObjectEntry], Any]) -> None:
        freed = []
        with self.lock:
            for oid in object_ids:
                entry = self.entries.get(oid)
                if entry is None:
                    continue
                change(entry)
                if not entry.in_use():
                    del self.entries[oid]
                    freed.append((oid, entry))
        for oid, entry in freed:
            self._post(self._on_free, oid, entry)

    # -- values ----------------------------------------------------------------------------
    def set_value(self, object_id: bytes, value: Value) -> ObjectEntry | None:
        """Record a value; wakes getters and runs callbacks. None if nobody holds the object."""
        with self.lock:
            entry = self.entries.get(object_id)
            if entry is None or entry.value is not None:
                return None
            entry.value = value
            callbacks, entry.callbacks = entry.callbacks, []
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
                entry.callbacks.append(callback)
                return True
        callback(value)
        return True
