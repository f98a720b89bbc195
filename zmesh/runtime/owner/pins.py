"""A process's pins on stored objects, kept after the last view dies.

Every `get` of a stored object used to pay a pin round trip to the node (PinObject, then
UnpinObject when the views died). A reader that gets the same object again (a driver reading
a large array in a loop; an actor reading its weights on every call) now keeps its pin while
idle and maps the object again without asking. The pin is what keeps the object in place,
so nothing is read that could have moved: the node never drops a pin itself, it asks for
idle pins back (`ReleasePins`) when the object is freed or the store needs room, and the
reader gives back the idle ones at once and the busy ones when their last view dies.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

IDLE_LIMIT = 32
"""Idle pins one process keeps (the oldest goes back first)."""

Loc = TypeVar("Loc")


@dataclass(eq=False)
class _Pin(Generic[Loc]):
    loc: Loc
    views: int = 1
    give_back: bool = False  # the node asked for it: unpin when the last view dies


class PinCache(Generic[Loc]):
    """Pins by object id; `unpin(oid)` sends one UnpinObject (any thread)."""

    def __init__(self, unpin: Callable[[bytes], None], idle_limit: int = IDLE_LIMIT) -> None:
        self._unpin = unpin
        self._limit = idle_limit
        self._pins: dict[bytes, _Pin[Loc]] = {}
        self._idle: OrderedDict[bytes, None] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, object_id: bytes) -> Loc | None:
        """The location of an object this process holds a pin on, now with one more view
        counted; None: pin it with the node first (then `add`)."""
        with self._lock:
            pin = self._pins.get(object_id)
            if pin is None or pin.give_back:
                return None
            pin.views += 1
            self._idle.pop(object_id, None)
            return pin.loc

    def add(self, object_id: bytes, loc: Loc) -> None:
        """The node pinned the object for one new view."""
        extra = False
        with self._lock:
            pin = self._pins.get(object_id)
            if pin is None or pin.give_back:
                if pin is not None:  # an old pin still draining: this one replaces it
                    pin.views += 1
                    extra = True
                else:
                    self._pins[object_id] = _Pin(loc)
            else:  # two readers pinned it at once: one pin is enough
                pin.views += 1
                self._idle.pop(object_id, None)
                extra = True
        if extra:
            self._unpin(object_id)

    def released(self, object_id: bytes) -> None:
        """A view died (any thread)."""
        out: list[bytes] = []
        with self._lock:
            pin = self._pins.get(object_id)
            if pin is None:
                return
            pin.views -= 1
            if pin.views > 0:
                return
            if pin.give_back:
                del self._pins[object_id]
                out.append(object_id)
            else:
                self._idle[object_id] = None
                while len(self._idle) > self._limit:
                    oldest, _ = self._idle.popitem(last=False)
                    del self._pins[oldest]
                    out.append(oldest)
        for oid in out:
            self._unpin(oid)

    def give_back(self, object_ids: Iterable[bytes]) -> None:
        """The node asks for these pins: idle ones go back now, busy ones when unused."""
        out: list[bytes] = []
        with self._lock:
            for oid in object_ids:
                pin = self._pins.get(oid)
                if pin is None:
                    continue
                if pin.views == 0:
                    del self._pins[oid]
                    self._idle.pop(oid, None)
                    out.append(oid)
                else:
                    pin.give_back = True
        for oid in out:
            self._unpin(oid)

    def give_back_idle(self) -> None:
        """Every idle pin goes back (the process is closing)."""
        with self._lock:
            idle = list(self._idle)
        self.give_back(idle)

    def idle(self) -> list[bytes]:
        with self._lock:
            return list(self._idle)
