"""Client side of the object store: map segment files once, hand out views into them.

Drivers, workers and the node itself use a `StoreMapper` to reach object bytes at a
`Location`. Each segment is mapped at most twice per process (read-write for writers,
read-only for readers) and stays mapped, so a reused region costs no page faults. Readers
get read-only zero-copy views whose last reference going away calls back (to unpin).
"""

from __future__ import annotations

import mmap
import os
import weakref
from collections.abc import Callable

from zmesh.store.arena import Location

_MADV_POPULATE_READ = 22
_MADV_POPULATE_WRITE = 23
_POPULATE_CHUNK = 2 << 20
"""Regions are prefaulted in chunks of this size, each once per mapping: the kernel's
populate walk costs ~a copy's time even when every page is already mapped."""


class _Mapping:
    __slots__ = ("mm", "populated", "advice")

    def __init__(self, mm: mmap.mmap, advice: int) -> None:
        self.mm = mm
        self.advice = advice
        self.populated = bytearray(-(-len(mm) // _POPULATE_CHUNK))


class StoreMapper:
    """Maps the segment files of one store directory into this process, each once.

    Not thread-safe: use it from one thread (the process's event loop or a lock around it).
    """

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._rw: dict[str, _Mapping] = {}
        self._ro: dict[str, _Mapping] = {}
        self._closed = False
        self._can_populate = hasattr(mmap.mmap, "madvise")

    def writable(self, loc: Location, *, populate: bool = True) -> memoryview:
        """A writable view of the object's bytes (for the writer, until seal).

        With `populate` its pages are prefaulted now, all of them; a caller that writes a
        large object piece by piece on an event loop passes False and calls `prefault` for
        each piece, so that no single step costs time in proportion to the whole object.
        """
        m = self._mapping(loc, writable=True, populate=populate)
        return memoryview(m.mm)[loc.offset : loc.offset + loc.size]

    def readable(self, loc: Location, on_release: Callable[[], None], *,
                 populate: bool = True) -> memoryview:
        """A read-only zero-copy view of the object's bytes.

        The view is backed by a read-only numpy carrier over the segment's read-only mapping;
        when the carrier and every view or array derived from it are garbage, `on_release`
        runs (from whichever thread drops the last reference; never at interpreter exit, where
        the node's release of this client covers it). `populate` as in `writable`.
        """
        m = self._mapping(loc, writable=False, populate=populate)
        import numpy as np  # only readers need it; a node starts faster without it

        carrier = np.frombuffer(m.mm, dtype=np.uint8, count=loc.size, offset=loc.offset)
        weakref.finalize(carrier, on_release).atexit = False
        return carrier.data

    def prefault(self, loc: Location, start: int, length: int, *, writable: bool) -> None:
        """Prefault bytes [start, start + length) of the object at `loc` in its read-write
        (`writable`) or read-only mapping, which a view of it must have made already."""
        m = (self._rw if writable else self._ro).get(loc.segment)
        if m is None:
            raise ValueError(f"segment {loc.segment!r} is not mapped "
                             f"{'read-write' if writable else 'read-only'} here")
        if start < 0 or length < 0 or start + length > loc.size:
            raise ValueError(f"range of {length} bytes at {start} lies outside the object "
                             f"({loc.size} bytes)")
        if self._can_populate and length:
            self._populate(m, loc.offset + start, length)

    def forget(self, segment: str) -> bool:
        """Unmap `segment` (its file was removed); False if views of it are still alive, in
        which case it is unmapped when the last of them dies."""
        done = True
        for table in (self._rw, self._ro):
            m = table.pop(segment, None)
            if m is not None:
                done = _try_close(m.mm) and done
        return done

    @property
    def mapped_segments(self) -> list[str]:
        return sorted(set(self._rw) | set(self._ro))

    def close(self) -> None:
        """Unmap every segment. A mapping with views still alive cannot be closed now; it is
        dropped here and unmapped by the kernel when its last view is garbage."""
        self._closed = True
        for name in self.mapped_segments:
            self.forget(name)

    def _mapping(self, loc: Location, *, writable: bool, populate: bool = True) -> _Mapping:
        if self._closed:
            raise ValueError(f"StoreMapper for {self.directory} is closed")
        table = self._rw if writable else self._ro
        m = table.get(loc.segment)
        if m is None:
            m = self._map(loc.segment, writable)
            table[loc.segment] = m
        if loc.offset < 0 or loc.size < 0 or loc.offset + loc.size > len(m.mm):
            raise ValueError(
                f"location {loc} lies outside segment {loc.segment!r} ({len(m.mm)} bytes)"
            )
        if populate and self._can_populate and loc.size:
            self._populate(m, loc.offset, loc.size)
        return m

    def _map(self, segment: str, writable: bool) -> _Mapping:
        if not segment or os.sep in segment or segment.startswith(".") or "\0" in segment:
            raise ValueError(f"bad segment name {segment!r}: expected a file name in the store")
        self._forget_removed()
        path = os.path.join(self.directory, segment)
        try:
            fd = os.open(path, (os.O_RDWR if writable else os.O_RDONLY) | os.O_CLOEXEC)
        except FileNotFoundError:
            raise ValueError(f"segment {segment!r} does not exist in {self.directory}") from None
        try:
            access = mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ
            mm = mmap.mmap(fd, 0, access=access)
        finally:
            os.close(fd)
        return _Mapping(mm, _MADV_POPULATE_WRITE if writable else _MADV_POPULATE_READ)

    def _forget_removed(self) -> None:
        # Segments only disappear when empty; a new mapping is rare, so checking here
        # bounds how long a client keeps a removed segment's pages alive.
        for name in self.mapped_segments:
            if not os.path.exists(os.path.join(self.directory, name)):
                self.forget(name)

    def _populate(self, m: _Mapping, offset: int, size: int) -> None:
        first = offset // _POPULATE_CHUNK
        last = (offset + size - 1) // _POPULATE_CHUNK
        flags = m.populated
        i = first
        while i <= last:
            if flags[i]:
                i += 1
                continue
            j = i
            while j <= last and not flags[j]:
                j += 1
            start = i * _POPULATE_CHUNK
            length = min(j * _POPULATE_CHUNK, len(m.mm)) - start
            try:
                m.mm.madvise(m.advice, start, length)
            except OSError:
                # Kernel before 5.14: pages fault in on first touch instead.
                self._can_populate = False
                return
            flags[i:j] = b"\x01" * (j - i)
            i = j


def _try_close(mm: mmap.mmap) -> bool:
    try:
        mm.close()
    except BufferError:
        return False
    return True
