"""Room in the node's store: allocations, unpins, and asking readers for the pins they keep.

Readers keep their pin on an object after its last view dies (runtime/owner/pins.py), so a
second `get` needs no round trip. The node never drops a pin itself; it asks (`ReleasePins`)
when a pinned object is freed, and when an allocation finds no room because objects are
pinned: the allocation then waits for the unpins (at most ALLOC_WAIT_S) before failing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import msgspec

from zmesh.errors import ObjectLostError, ObjectStoreFullError, ZmeshError
from zmesh.protocol.messages import runtime as m
from zmesh.runtime import values
from zmesh.store.arena import Location
from zmesh.store.object_store import ObjectStore

logger = logging.getLogger("zmesh.node")

ALLOC_WAIT_S = 1.0
"""How long an allocation waits for readers to give back pins before it fails."""
RESERVE_STEP = 32 << 20
"""Bytes of a new object's pages reserved per turn of the node's loop before the answer."""


class RoomPorts(msgspec.Struct, frozen=True):
    send: Callable[..., Any]  # (address, message)
    call_later: Callable[[float, Callable[[], None]], Any]
    clock: Callable[[], float]
    note_owner: Callable[[bytes, str], None]  # the object's owner, freed if it dies
    live: Callable[[str], bool]  # whether a process is a live client of this node


class StoreRoom:
    """AllocObject and UnpinObject for one node's store, and waits for room (loop thread)."""

    def __init__(self, store: ObjectStore, node_id: str, ports: RoomPorts) -> None:
        self.store = store
        self.node_id = node_id
        self.ports = ports
        self._waiting: list[tuple[Callable[[bool], bool], float]] = []
        store.on_pinned_free = self._ask_back

    def _ask_back(self, object_id: bytes, readers: list[str]) -> None:
        for reader in readers:
            self.ports.send(reader, m.ReleasePins(object_ids=[object_id]))

    def on_alloc(self, sender: str, msg: m.AllocObject, bufs: list[Any]) -> None:
        self.when_room(lambda final: self._try(sender, msg, final=final))

    def when_room(self, attempt: Callable[[bool], bool]) -> None:
        """Run `attempt(final)`, which answers and returns True, or returns False when the
        store had no room: then readers are asked for their idle pins and it runs again
        after each unpin, and with `final` (answer whatever happens) after ALLOC_WAIT_S."""
        if attempt(False):
            return
        pinned = self.store.pins_by_client()
        if not pinned:
            attempt(True)
            return
        for reader, object_ids in pinned.items():
            self.ports.send(reader, m.ReleasePins(object_ids=object_ids))
        self._waiting.append((attempt, self.ports.clock() + ALLOC_WAIT_S))
        self.ports.call_later(ALLOC_WAIT_S, self._expire)

    def _try(self, sender: str, msg: m.AllocObject, *, final: bool) -> bool:
        """Allocate and answer (once its pages are reserved); False (no answer) when the
        store is full and not `final`. A writer this node already took for dead (its request
        came late, or it died while waiting for room) gets nothing: its objects were
        released with it, and one allocated now would stay for good."""
        if not self.ports.live(msg.owner):
            self._fail(sender, msg, ZmeshError(
                f"object {msg.object_id.hex()} not allocated: its writer {msg.owner} is not a "
                f"live process of node {self.node_id}"))
            return True
        try:
            loc = self.store.allocate(msg.object_id, msg.size, owner=msg.owner, reserve=False)
        except ObjectStoreFullError as exc:
            if not final:
                return False
            self._fail(sender, msg, exc)
            return True
        except Exception as exc:
            self._fail(sender, msg, exc)
            return True
        self._reserve(sender, msg, loc)
        return True

    def _reserve(self, sender: str, msg: m.AllocObject, loc: Location) -> None:
        """Reserve the new object's pages RESERVE_STEP bytes per turn of the loop (a fresh
        1 GiB segment took ~0.3 s, seconds on a busy machine), then answer."""
        try:
            done = self.store.reserve_step(msg.object_id, 0, msg.size, RESERVE_STEP)
        except ObjectLostError:
            return  # freed meanwhile: its writer is gone (release_client)
        except Exception as exc:
            self.store.free(msg.object_id)
            self._fail(sender, msg, exc)
            return
        if not done:
            self.ports.call_later(0.0, lambda: self._reserve(sender, msg, loc))
            return
        owner = msg.for_owner or msg.owner
        self.ports.note_owner(msg.object_id, owner)
        self.ports.send(sender, m.AllocReply(request_id=msg.request_id, loc=m.StoreLoc(
            node=self.node_id, segment=loc.segment, offset=loc.offset, size=loc.size,
            object_id=msg.object_id, owner=owner)))

    def _fail(self, sender: str, msg: m.AllocObject, exc: BaseException) -> None:
        self.ports.send(sender, m.AllocReply(request_id=msg.request_id,
                                             error=values.encode_error(exc).data))

    def on_unpin(self, sender: str, msg: m.UnpinObject, bufs: list[Any]) -> None:
        try:
            self.store.unpin(msg.object_id, msg.client)
        except Exception as exc:
            logger.warning("store: unpin of %s failed: %s", msg.object_id.hex(), exc)
            return
        if self._waiting:
            self._retry()

    def _expire(self) -> None:
        self._retry()
        now = self.ports.clock()
        late = [w for w in self._waiting if w[1] <= now]
        self._waiting = [w for w in self._waiting if w[1] > now]
        for attempt, _ in late:
            attempt(True)

    def _retry(self) -> None:
        waiting, self._waiting = self._waiting, []
        for attempt, deadline in waiting:
            if not attempt(False):
                self._waiting.append((attempt, deadline))
