"""The node's object arena: large segment files carved by a page-aligned allocator.

Fresh pages cost a page fault each (~1 GB/s) where copying into memory already mapped
runs near memcpy speed, so the store keeps a few big segment files and reuses their
space instead of making one file per object. `FreeListAllocator` is the sans-IO
bookkeeping for one segment; `Arena` owns the files and the budget across segments.
"""

from __future__ import annotations

import bisect
import errno
import os
from collections.abc import Callable

import msgspec

from zmesh.errors import ObjectStoreFullError

PAGE_SIZE = 4096
"""Every allocation starts on (and is a multiple of) this many bytes."""

SEGMENT_PREFIX = "seg-"

RESERVE_PIECE = 16 << 20
"""A segment's pages are reserved (posix_fallocate) in pieces of this many bytes, each when
an allocation first needs it: one call for a whole 1 GiB segment took ~0.3 s (seconds on a
busy machine), all of it inside one turn of the node's loop."""


def round_up(size: int, align: int = PAGE_SIZE) -> int:
    """`size` rounded up to a multiple of `align`."""
    return -(-size // align) * align


class Location(msgspec.Struct, frozen=True):
    """Where an object's bytes lie: a segment file of the node's store directory, an offset
    (a multiple of PAGE_SIZE) and the object's exact size. Plain fields, so it travels in
    msgspec and pickle messages unchanged."""

    segment: str
    offset: int
    size: int


class FreeListAllocator:
    """Best-fit allocator over the byte range [0, capacity), sans-IO.

    Blocks are multiples of `align`; a freed block merges with free neighbours at once,
    so free space is never split into adjacent pieces. Ties in best fit go to the lowest
    offset, which keeps reuse deterministic (free then allocate the same size: same offset).
    """

    def __init__(self, capacity: int, align: int = PAGE_SIZE) -> None:
        if align <= 0 or capacity < 0 or capacity % align:
            raise ValueError(
                f"allocator capacity {capacity} must be a non-negative multiple of align {align}"
            )
        self.capacity = capacity
        self.align = align
        self.used = 0
        self._free_starts: list[int] = [0] if capacity else []
        self._free_size: dict[int, int] = {0: capacity} if capacity else {}
        self._allocated: dict[int, int] = {}

    @property
    def free_bytes(self) -> int:
        return self.capacity - self.used

    @property
    def is_empty(self) -> bool:
        """True when nothing is allocated."""
        return not self._allocated

    def block_size(self, size: int) -> int:
        """The bytes an allocation of `size` really takes (at least one aligned unit)."""
        if size < 0:
            raise ValueError(f"allocation size must be >= 0, got {size}")
        return round_up(max(size, 1), self.align)

    def best_fit(self, size: int) -> int | None:
        """Size of the smallest free block that holds `size` bytes, or None if none does."""
        need = self.block_size(size)
        best: int | None = None
        for free in self._free_size.values():
            if free >= need and (best is None or free < best):
                best = free
                if free == need:
                    break
        return best

    def allocate(self, size: int) -> int | None:
        """Reserve `size` bytes; returns their offset, or None when no free block fits."""
        need = self.block_size(size)
        best_i = -1
        best_size = 0
        for i, start in enumerate(self._free_starts):
            free = self._free_size[start]
            if free >= need and (best_i < 0 or free < best_size):
                best_i, best_size = i, free
                if free == need:
                    break
        if best_i < 0:
            return None
        start = self._free_starts[best_i]
        del self._free_size[start]
        if best_size == need:
            del self._free_starts[best_i]
        else:
            # The remainder stays between the same neighbours, so sorted order holds.
            self._free_starts[best_i] = start + need
            self._free_size[start + need] = best_size - need
        self._allocated[start] = need
        self.used += need
        return start

    def free(self, offset: int) -> int:
        """Release the block at `offset`; returns its size. ValueError if nothing is there."""
        size = self._allocated.pop(offset, None)
        if size is None:
            raise ValueError(f"no allocation starts at offset {offset}")
        self.used -= size
        i = bisect.bisect_left(self._free_starts, offset)
        start, end = offset, offset + size
        if i > 0:
            left = self._free_starts[i - 1]
            if left + self._free_size[left] == offset:
                start = left
                del self._free_size[left]
                del self._free_starts[i - 1]
                i -= 1
        if i < len(self._free_starts) and self._free_starts[i] == end:
            end += self._free_size.pop(end)
            del self._free_starts[i]
        self._free_starts.insert(i, start)
        self._free_size[start] = end - start
        return size

    def free_blocks(self) -> list[tuple[int, int]]:
        """(offset, size) of every free block, by offset."""
        return [(s, self._free_size[s]) for s in self._free_starts]

    def allocations(self) -> dict[int, int]:
        """offset -> size of every live allocation."""
        return dict(self._allocated)


class _Segment(msgspec.Struct, dict=True):
    name: str
    path: str
    size: int
    allocator: FreeListAllocator
    reserved: bytearray  # one flag per RESERVE_PIECE: its pages are reserved already


class Arena:
    """Segment files in one store directory, grown lazily up to `capacity` bytes in all.

    A new segment is as large as all the existing ones together (at least `segment_size`,
    at most `max_segment_size`, always enough for the request), so a store needs few files.
    Segment names are never reused, so a client's cached mapping can never show another
    segment's bytes. With `reserve`, pages are reserved (posix_fallocate) before anyone
    writes them, so a full /dev/shm is an ObjectStoreFullError from `reserve` and not a
    SIGBUS in a writer later: `allocate` hands out space, and the caller reserves it with
    `reserve` (all at once, or piece by piece with `reserve_step` between other work) before
    it or its client writes there. Single-threaded, like the node loop that drives it.
    """

    def __init__(
        self,
        directory: str,
        capacity: int,
        *,
        segment_size: int = 64 << 20,
        max_segment_size: int = 1 << 30,
        reserve: bool = True,
        on_segment_removed: Callable[[str], object] | None = None,
    ) -> None:
        if capacity < PAGE_SIZE:
            raise ValueError(f"arena capacity must be at least {PAGE_SIZE} bytes, got {capacity}")
        if segment_size < PAGE_SIZE or segment_size % PAGE_SIZE:
            raise ValueError(
                f"segment_size must be a positive multiple of {PAGE_SIZE}, got {segment_size}"
            )
        if max_segment_size < segment_size or max_segment_size % PAGE_SIZE:
            raise ValueError(
                f"max_segment_size {max_segment_size} must be a multiple of {PAGE_SIZE} "
                f"and at least segment_size {segment_size}"
            )
        self.directory = directory
        self.capacity = capacity - capacity % PAGE_SIZE
        self._segment_size = segment_size
        self._max_segment_size = max_segment_size
        self._reserve = reserve
        self._on_segment_removed = on_segment_removed
        self._segments: dict[str, _Segment] = {}
        self._next_id = 0
        self.segment_bytes = 0

    @property
    def used(self) -> int:
        """Bytes allocated, page-rounded, over every segment."""
        return sum(s.allocator.used for s in self._segments.values())

    @property
    def segments(self) -> list[str]:
        return list(self._segments)

    def segment_size(self, name: str) -> int:
        return self._segments[name].size

    def allocate(self, size: int) -> tuple[str, int] | None:
        """Hand out `size` bytes: (segment, offset), or None if they cannot fit in the budget
        without moving objects (`reserve` them before writing there). Reuses free space
        first, then grows a segment, then trades empty segments for one large enough."""
        if size < 0:
            raise ValueError(f"allocation size must be >= 0, got {size}")
        need = round_up(max(size, 1))
        best: tuple[int, _Segment] | None = None
        for seg in self._segments.values():
            fit = seg.allocator.best_fit(need)
            if fit is not None and (best is None or fit < best[0]):
                best = (fit, seg)
        if best is not None:
            offset = best[1].allocator.allocate(need)
            assert offset is not None
            return best[1].name, offset
        if need > self.capacity - self.segment_bytes and not self._drop_empty_segments(need):
            return None
        seg = self._create_segment(self._new_segment_size(need))
        offset = seg.allocator.allocate(need)
        assert offset is not None
        return seg.name, offset

    def reserve(self, segment: str, offset: int, length: int) -> None:
        """Reserve the pages of [offset, offset + length) in `segment` (each piece once);
        ObjectStoreFullError when the file system has no room for them."""
        self.reserve_step(segment, offset, length, length + RESERVE_PIECE)

    def reserve_step(self, segment: str, offset: int, length: int, budget: int) -> bool:
        """Reserve pieces of [offset, offset + length) in `segment` not reserved yet, stopping
        once `budget` bytes were reserved by this call; True when the whole range is."""
        seg = self._segments.get(segment)
        if seg is None:
            raise ValueError(f"no segment {segment!r} in arena {self.directory}")
        if offset < 0 or length < 0 or offset + length > seg.size:
            raise ValueError(f"range of {length} bytes at {offset} lies outside segment "
                             f"{segment!r} ({seg.size} bytes)")
        flags = seg.reserved
        first, last = offset // RESERVE_PIECE, (offset + max(length, 1) - 1) // RESERVE_PIECE
        spent = 0
        for piece in range(first, last + 1):
            if flags[piece]:
                continue
            if spent >= budget:
                return False
            start = piece * RESERVE_PIECE
            size = min(RESERVE_PIECE, seg.size - start)
            if not self._fallocate(seg, start, size):
                flags[:] = b"\x01" * len(flags)  # a file system without it: sparse, as before
                return True
            flags[piece] = 1
            spent += size
        return True

    def _fallocate(self, seg: _Segment, start: int, size: int) -> bool:
        """posix_fallocate one piece; False if the file system cannot do it at all."""
        try:
            fd = os.open(seg.path, os.O_RDWR | os.O_CLOEXEC)
        except OSError as e:
            raise ObjectStoreFullError(f"cannot open segment {seg.path}: {e.strerror}") from e
        try:
            os.posix_fallocate(fd, start, size)
        except OSError as e:
            if e.errno in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                return False
            raise ObjectStoreFullError(
                f"cannot reserve {size} bytes of segment {seg.path}: {e.strerror}; free "
                "space there or lower object_store_memory"
            ) from e
        finally:
            os.close(fd)
        return True

    def free(self, segment: str, offset: int) -> None:
        """Return an allocation's space to its segment (the file and its pages stay)."""
        seg = self._segments.get(segment)
        if seg is None:
            raise ValueError(f"no segment {segment!r} in arena {self.directory}")
        seg.allocator.free(offset)

    def close(self) -> None:
        """Remove every segment file."""
        for name in list(self._segments):
            self._remove_segment(name)

    def _new_segment_size(self, need: int) -> int:
        target = min(self._max_segment_size, max(self._segment_size, self.segment_bytes))
        return min(max(need, target), self.capacity - self.segment_bytes)

    def _drop_empty_segments(self, need: int) -> bool:
        """Remove empty segments, smallest first, until `need` fits in the budget; False
        (removing nothing) when even all of them would not make room."""
        empty = sorted(
            (s for s in self._segments.values() if s.allocator.is_empty), key=lambda s: s.size
        )
        room = self.capacity - self.segment_bytes
        if room + sum(s.size for s in empty) < need:
            return False
        for seg in empty:
            if room >= need:
                break
            self._remove_segment(seg.name)
            room += seg.size
        return True

    def _create_segment(self, size: int) -> _Segment:
        name = f"{SEGMENT_PREFIX}{self._next_id:06d}"
        self._next_id += 1
        path = os.path.join(self.directory, name)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            os.ftruncate(fd, size)  # sparse: pages are reserved as allocations need them
        except OSError as e:
            os.close(fd)
            os.unlink(path)
            raise ObjectStoreFullError(
                f"cannot make a {size}-byte segment in {self.directory}: {e.strerror}; "
                "free space there or lower object_store_memory"
            ) from e
        os.close(fd)
        pieces = -(-size // RESERVE_PIECE)
        flags = bytearray(pieces) if self._reserve and hasattr(os, "posix_fallocate") \
            else bytearray(b"\x01" * pieces)
        seg = _Segment(name, path, size, FreeListAllocator(size), flags)
        self._segments[name] = seg
        self.segment_bytes += size
        return seg

    def _remove_segment(self, name: str) -> None:
        seg = self._segments.pop(name)
        self.segment_bytes -= seg.size
        if self._on_segment_removed is not None:
            self._on_segment_removed(name)
        try:
            os.unlink(seg.path)
        except FileNotFoundError:
            pass
