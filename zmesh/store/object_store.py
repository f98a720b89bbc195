"""The node's object store bookkeeping: which objects lie where, who pins them, the budget.

Drivers and workers write and read object bytes themselves through a `StoreMapper`; the
node's `ObjectStore` only decides where bytes go (`allocate`), tracks their life
(`seal`, `pin`, `unpin`, `free`) and keeps the arena under its capacity by evicting
secondary copies, then spilling primary copies to disk, least recently used first.
Single-threaded: the node's event loop is its only caller.
"""

from __future__ import annotations

import os
import shutil
from collections import OrderedDict
from collections.abc import Callable

import msgspec

from zmesh.errors import ObjectLostError, ObjectStoreFullError
from zmesh.store.arena import Arena, Location, round_up
from zmesh.store.mapping import StoreMapper
from zmesh.store.spill import SpillFiles
from zmesh.store.sweep import SPILL_RECORD_FILE

__all__ = ["Location", "ObjectStore", "StoreStats"]

_MAX_ID_LEN = 64


class StoreStats(msgspec.Struct, frozen=True):
    """A snapshot of the store: bytes are page-rounded where they count arena space."""

    capacity: int
    used: int
    segment_bytes: int
    segments: int
    num_objects: int
    num_pinned: int
    spilled_objects: int
    spilled_bytes: int
    spill_count: int
    restore_count: int
    evicted_count: int


class _Entry(msgspec.Struct, eq=False, dict=True):
    object_id: bytes
    size: int
    owner: str
    location: Location | None  # None while spilled
    sealed: bool = False
    secondary: bool = False
    freed: bool = False  # freed while pinned: its space goes back at the last unpin
    pins: dict[str, int] = msgspec.field(default_factory=dict)


class ObjectStore:
    """Objects of one node in an arena of segment files under `directory`.

    `capacity` bounds the segment files' total size (so the directory's disk use);
    `spill_dir` is the parent of this store's spill directory (default: the system temp
    dir). Pinned objects (a reader holds a view) and unsealed ones (a writer is filling
    them) are never moved.
    """

    def __init__(
        self,
        directory: str,
        capacity: int,
        *,
        spill_dir: str | None = None,
        segment_size: int = 64 << 20,
        max_segment_size: int = 1 << 30,
        reserve: bool = True,
    ) -> None:
        self.directory = directory
        self._made_dir = False
        try:
            os.makedirs(directory, mode=0o700)
            self._made_dir = True
        except FileExistsError:
            if not os.path.isdir(directory):
                raise NotADirectoryError(
                    f"store directory {directory} is not a directory"
                ) from None
        self._mapper = StoreMapper(directory)
        self._arena = Arena(
            directory,
            capacity,
            segment_size=segment_size,
            max_segment_size=max(max_segment_size, segment_size),
            reserve=reserve,
            on_segment_removed=self._mapper.forget,
        )
        self._spill = SpillFiles(spill_dir)
        self._entries: dict[bytes, _Entry] = {}
        # Called as (object id, readers) when a freed object stays because readers pin it:
        # the node asks them for the pins they keep idle (runtime/owner/pins.py).
        self.on_pinned_free: Callable[[bytes, list[str]], None] | None = None
        self._lru: OrderedDict[bytes, None] = OrderedDict()  # sealed, in the arena, not freed
        self._client_pins: dict[str, set[bytes]] = {}
        self._writing: dict[str, set[bytes]] = {}  # owner -> unsealed objects it allocated
        self._evicted: list[bytes] = []
        self._spill_count = 0
        self._restore_count = 0
        self._evicted_count = 0
        self._closed = False

    # -- object life -------------------------------------------------------------------

    def allocate(self, object_id: bytes, size: int, *, owner: str,
                 reserve: bool = True) -> Location:
        """Reserve `size` bytes for a new, unsealed object that `owner` will write.

        Makes room by evicting and spilling if over budget; ObjectStoreFullError if even
        that cannot, naming the size, the capacity and what is pinned. With `reserve` False
        the pages are not reserved yet: the caller reserves them with `reserve_step` (piece
        by piece, between other work) before anyone writes them.
        """
        self._check_open()
        _check_id(object_id)
        if not isinstance(size, int) or size < 0:
            raise ValueError(f"object size must be an int >= 0, got {size!r}")
        existing = self._entries.get(object_id)
        if existing is not None:
            state = (
                "freed but still pinned by readers" if existing.freed else "already in the store"
            )
            raise ValueError(f"cannot allocate object {object_id.hex()}: it is {state}")
        loc = self._reserve(object_id, size)
        if reserve:
            try:
                self._arena.reserve(loc.segment, loc.offset, loc.size)
            except ObjectStoreFullError:
                self._arena.free(loc.segment, loc.offset)
                raise
        self._entries[object_id] = _Entry(object_id, size, owner, loc)
        self._writing.setdefault(owner, set()).add(object_id)
        return loc

    def reserve(self, object_id: bytes, start: int, length: int) -> None:
        """Reserve all of bytes [start, start + length) of an object being written (see
        `reserve_step`); for a writer about to fill that range."""
        self.reserve_step(object_id, start, length, length + (1 << 62))

    def reserve_step(self, object_id: bytes, start: int, length: int, budget: int) -> bool:
        """Reserve pages of bytes [start, start + length) of an unsealed object allocated
        with reserve=False, at most about `budget` bytes' worth this call; True once all of
        that range is. ObjectStoreFullError when the file system has no room left."""
        e = self._live(object_id)
        if e.sealed or e.location is None:
            raise ValueError(f"object {object_id.hex()} is not being written")
        if start < 0 or length < 0 or start + length > e.size:
            raise ValueError(f"range of {length} bytes at {start} lies outside object "
                             f"{object_id.hex()} ({e.size} bytes)")
        loc = e.location
        return self._arena.reserve_step(loc.segment, loc.offset + start, length, budget)

    def seal(self, object_id: bytes) -> None:
        """Mark the object written: readers may pin it, and it may now be moved."""
        e = self._live(object_id)
        if e.sealed:
            raise ValueError(f"object {object_id.hex()} is already sealed")
        e.sealed = True
        self._stop_writing(e)
        self._lru[object_id] = None

    def pin(self, object_id: bytes, client: str) -> Location:
        """`client` maps the object to read it: it stays in place until unpinned. A spilled
        object is restored first (which may spill others); ObjectLostError if unknown."""
        self._check_open()
        e = self._live(object_id)
        if not e.sealed:
            raise ValueError(f"object {object_id.hex()} is not sealed yet; pin it after seal")
        if e.location is None:
            self._restore(e)
        e.pins[client] = e.pins.get(client, 0) + 1
        self._client_pins.setdefault(client, set()).add(object_id)
        self._lru.move_to_end(object_id)
        assert e.location is not None
        return e.location

    def unpin(self, object_id: bytes, client: str) -> None:
        """Drop one of `client`'s pins (each `pin` needs one `unpin`)."""
        e = self._entries.get(object_id)
        count = 0 if e is None else e.pins.get(client, 0)
        if e is None or not count:
            raise ValueError(f"client {client!r} holds no pin on object {object_id.hex()}")
        if count > 1:
            e.pins[client] = count - 1
            return
        del e.pins[client]
        self._client_pins[client].discard(object_id)
        if not e.pins and e.freed:
            self._drop(e)

    def pins_by_client(self) -> dict[str, list[bytes]]:
        """Which objects each reader pins (all of them could make room if given back)."""
        out: dict[str, list[bytes]] = {}
        for client, object_ids in self._client_pins.items():
            if object_ids:
                out[client] = sorted(object_ids)
        return out

    def release_client(self, client: str) -> None:
        """`client`'s process died: drop its pins and the unsealed objects it was writing."""
        for object_id in self._client_pins.pop(client, set()):
            e = self._entries[object_id]
            del e.pins[client]
            if not e.pins and e.freed:
                self._drop(e)
        for object_id in self._writing.pop(client, set()):
            self._drop(self._entries[object_id])

    def free(self, object_id: bytes) -> bool:
        """The object's last reference is gone: release its space (at once, or at its last
        unpin while readers still hold views). False if the store did not hold it (it was
        evicted or freed already), so a late free is harmless."""
        e = self._entries.get(object_id)
        if e is None or e.freed:
            return False
        if e.pins:
            e.freed = True
            self._lru.pop(object_id, None)
            self._stop_writing(e)
            if self.on_pinned_free is not None:
                self.on_pinned_free(object_id, sorted(e.pins))
        else:
            self._drop(e)
        return True

    def mark_secondary(self, object_id: bytes) -> None:
        """The object is a copy pulled from another node: evict it (never spill it) when
        room is needed."""
        self._live(object_id).secondary = True

    # -- queries -----------------------------------------------------------------------

    def secondaries(self) -> list[bytes]:
        """The copies pulled from other nodes that are stored here and not freed."""
        return [oid for oid, e in self._entries.items() if e.secondary and not e.freed]

    @property
    def mapper(self) -> StoreMapper:
        """The store's own mapping of its segment files (shared with the transfer service,
        so a segment the arena removes is forgotten by every user)."""
        return self._mapper

    def contains(self, object_id: bytes) -> bool:
        e = self._entries.get(object_id)
        return e is not None and not e.freed

    def is_sealed(self, object_id: bytes) -> bool:
        """Whether readers may pin it yet (a pin that races ahead of seal should wait)."""
        return self._live(object_id).sealed

    def is_spilled(self, object_id: bytes) -> bool:
        return self._live(object_id).location is None

    def take_evicted(self) -> list[bytes]:
        """Ids of the secondary copies evicted since the last call (to tell their owners)."""
        evicted, self._evicted = self._evicted, []
        return evicted

    def objects(self) -> list[dict[str, object]]:
        """Every object held here, for `zmesh memory`: id, size, owner, kind of copy, pins."""
        return [{"object_id": e.object_id.hex(), "size": e.size, "owner": e.owner,
                 "copy": "secondary" if e.secondary else "primary",
                 "state": "spilled" if e.location is None else
                          ("sealed" if e.sealed else "writing"),
                 "pinned_by": sorted(e.pins)}
                for e in self._entries.values() if not e.freed]

    def stats(self) -> StoreStats:
        return StoreStats(
            capacity=self._arena.capacity,
            used=self._arena.used,
            segment_bytes=self._arena.segment_bytes,
            segments=len(self._arena.segments),
            num_objects=sum(1 for e in self._entries.values() if not e.freed),
            num_pinned=sum(1 for e in self._entries.values() if e.pins),
            spilled_objects=self._spill.count,
            spilled_bytes=self._spill.total_bytes,
            spill_count=self._spill_count,
            restore_count=self._restore_count,
            evicted_count=self._evicted_count,
        )

    def close(self) -> None:
        """Remove every file this store made: segments, spill files, their directories."""
        if self._closed:
            return
        self._closed = True
        self._arena.close()
        self._mapper.close()
        self._spill.close()
        try:
            os.unlink(os.path.join(self.directory, SPILL_RECORD_FILE))
        except FileNotFoundError:
            pass
        if self._made_dir:
            shutil.rmtree(self.directory, ignore_errors=True)
        self._entries.clear()
        self._lru.clear()

    # -- budget ------------------------------------------------------------------------

    def _reserve(self, object_id: bytes, size: int) -> Location:
        need = round_up(max(size, 1))
        if need > self._arena.capacity - self._unmovable_bytes():
            raise self._full_error(object_id, size)
        got = self._arena.allocate(size)
        while got is None:
            victim = self._pick_victim()
            if victim is None:
                raise self._full_error(object_id, size, fragmented=True)
            self._move_out(victim)
            got = self._arena.allocate(size)
        return Location(got[0], got[1], size)

    def _pick_victim(self) -> _Entry | None:
        """The least recently used unpinned secondary copy, else primary copy."""
        for want_secondary in (True, False):
            for object_id in self._lru:
                e = self._entries[object_id]
                if not e.pins and e.secondary == want_secondary:
                    return e
        return None

    def _move_out(self, e: _Entry) -> None:
        if e.secondary:
            self._drop(e)
            self._evicted.append(e.object_id)
            self._evicted_count += 1
            return
        loc = e.location
        assert loc is not None
        if self._spill.path is None:
            self._record_spill_dir()
        view = self._mapper.writable(loc)
        try:
            self._spill.write(e.object_id, view)
        except OSError as err:
            raise ObjectStoreFullError(
                f"cannot spill object {e.object_id.hex()} ({e.size} bytes) to "
                f"{self._spill.path}: {err.strerror}"
            ) from err
        finally:
            view.release()
        self._arena.free(loc.segment, loc.offset)
        e.location = None
        del self._lru[e.object_id]
        self._spill_count += 1

    def _restore(self, e: _Entry) -> None:
        loc = self._reserve(e.object_id, e.size)
        try:
            self._arena.reserve(loc.segment, loc.offset, loc.size)
        except ObjectStoreFullError:
            self._arena.free(loc.segment, loc.offset)
            raise
        view = self._mapper.writable(loc)
        try:
            self._spill.read_into(e.object_id, view)
        except ObjectLostError:
            view.release()
            self._arena.free(loc.segment, loc.offset)
            self._drop(e)
            raise
        view.release()
        self._spill.delete(e.object_id)
        e.location = loc
        self._lru[e.object_id] = None
        self._restore_count += 1

    def _drop(self, e: _Entry) -> None:
        if e.location is not None:
            self._arena.free(e.location.segment, e.location.offset)
        else:
            self._spill.delete(e.object_id)
        del self._entries[e.object_id]
        self._lru.pop(e.object_id, None)
        self._stop_writing(e)

    def _stop_writing(self, e: _Entry) -> None:
        writing = self._writing.get(e.owner)
        if writing is not None:
            writing.discard(e.object_id)
            if not writing:
                del self._writing[e.owner]

    def _unmovable_bytes(self) -> int:
        return sum(
            round_up(max(e.size, 1))
            for e in self._entries.values()
            if e.location is not None and (e.pins or not e.sealed)
        )

    def _full_error(
        self, object_id: bytes, size: int, *, fragmented: bool = False
    ) -> ObjectStoreFullError:
        pinned = [e for e in self._entries.values() if e.pins and e.location is not None]
        unsealed = [e for e in self._entries.values() if not e.sealed and e.location is not None]
        why = (
            "free space is split between pinned objects"
            if fragmented
            else "the rest cannot be moved"
        )
        return ObjectStoreFullError(
            f"object store cannot fit object {object_id.hex()} ({size} bytes): capacity "
            f"{self._arena.capacity} bytes, {sum(e.size for e in pinned)} bytes pinned by "
            f"readers in {len(pinned)} objects, {sum(e.size for e in unsealed)} bytes in "
            f"{len(unsealed)} objects still being written; {why}. Drop views of objects you "
            "no longer need, or raise object_store_memory"
        )

    def _record_spill_dir(self) -> None:
        path = self._spill.ensure_dir()
        with open(os.path.join(self.directory, SPILL_RECORD_FILE), "w") as f:
            f.write(path + "\n")

    def _live(self, object_id: bytes) -> _Entry:
        e = self._entries.get(object_id)
        if e is None or e.freed:
            raise ObjectLostError(
                f"object {object_id.hex()} is not in the object store of {self.directory}"
            )
        return e

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"object store {self.directory} is closed")


def _check_id(object_id: bytes) -> None:
    if not isinstance(object_id, bytes) or not 0 < len(object_id) <= _MAX_ID_LEN:
        raise ValueError(f"object id must be 1 to {_MAX_ID_LEN} bytes, got {object_id!r:.80}")
