"""StoreMapper: cached mappings, read-only zero-copy views, release callbacks."""

from __future__ import annotations

import gc
import os
import pickle
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from zmesh.store.arena import Arena, Location
from zmesh.store.mapping import StoreMapper

MiB = 1 << 20


@pytest.fixture
def arena(tmp_path: Path) -> Iterator[Arena]:
    a = Arena(str(tmp_path), 16 * MiB, segment_size=4 * MiB)
    yield a
    a.close()


@pytest.fixture
def mapper(tmp_path: Path) -> Iterator[StoreMapper]:
    m = StoreMapper(str(tmp_path))
    yield m
    m.close()


def new_location(arena: Arena, size: int) -> Location:
    got = arena.allocate(size)
    assert got is not None
    return Location(got[0], got[1], size)


def segment_span(mapper: StoreMapper, segment: str) -> tuple[int, int]:
    mm = mapper._ro[segment].mm
    base = np.frombuffer(mm, dtype=np.uint8)
    span = (base.ctypes.data, base.ctypes.data + len(mm))
    del base
    return span


def test_readable_view_is_zero_copy_into_the_segment(arena: Arena, mapper: StoreMapper) -> None:
    loc = new_location(arena, 300_000)
    with mapper.writable(loc) as w:
        np.frombuffer(w, dtype=np.uint8)[:] = 7
    view = mapper.readable(loc, lambda: None)
    array = np.frombuffer(view, dtype=np.uint8)
    start, end = segment_span(mapper, loc.segment)
    assert start + loc.offset == array.ctypes.data
    assert array.ctypes.data + array.nbytes <= end
    assert int(array.sum()) == 7 * loc.size
    with mapper.writable(loc) as w:
        w[0] = 99
    assert array[0] == 99, "reader and writer share the same memory"


def test_readable_view_cannot_be_written(arena: Arena, mapper: StoreMapper) -> None:
    loc = new_location(arena, 10_000)
    view = mapper.readable(loc, lambda: None)
    assert view.readonly
    with pytest.raises(TypeError):
        view[0] = 1
    array = np.frombuffer(view, dtype=np.uint8)
    with pytest.raises(ValueError):
        array[0] = 1
    with pytest.raises(ValueError):
        array.flags.writeable = True
    carrier = view.obj
    assert isinstance(carrier, np.ndarray)
    with pytest.raises(ValueError):
        carrier.flags.writeable = True


def test_on_release_fires_only_when_every_derived_view_is_garbage(
    arena: Arena, mapper: StoreMapper
) -> None:
    loc = new_location(arena, 1 << 16)
    released: list[int] = []
    view = mapper.readable(loc, lambda: released.append(1))
    part = view[100:200]
    floats = np.frombuffer(view, dtype=np.float32)
    column = floats.reshape(-1, 4)[:, 1]
    # The way the pickle5 serializer rebuilds an array from an out-of-band buffer.
    header = pickle.dumps(np.empty(len(view), np.uint8), protocol=5, buffer_callback=list().append)
    unpickled = pickle.loads(header, buffers=[view])
    assert not unpickled.flags.writeable
    assert unpickled.ctypes.data == floats.ctypes.data, "rebuilt without a copy"
    del view, floats
    gc.collect()
    assert released == []
    del part
    gc.collect()
    assert released == []
    del column
    gc.collect()
    assert released == []
    del unpickled
    gc.collect()
    assert released == [1]


def test_each_segment_is_mapped_once(arena: Arena, mapper: StoreMapper) -> None:
    a = new_location(arena, MiB)
    b = new_location(arena, MiB)
    assert a.segment == b.segment
    mapper.readable(a, lambda: None)
    mm = mapper._ro[a.segment].mm
    mapper.readable(b, lambda: None)
    assert mapper._ro[a.segment].mm is mm
    assert mapper.mapped_segments == [a.segment]


def test_location_outside_the_segment_is_refused(arena: Arena, mapper: StoreMapper) -> None:
    loc = new_location(arena, 100)
    size = arena.segment_size(loc.segment)
    with pytest.raises(ValueError, match="outside segment"):
        mapper.writable(Location(loc.segment, size - 4096, 8192))


@pytest.mark.parametrize("name", ["../etc/passwd", ".hidden", "", "a/b"])
def test_segment_names_that_leave_the_store_are_refused(mapper: StoreMapper, name: str) -> None:
    with pytest.raises(ValueError, match="segment name"):
        mapper.readable(Location(name, 0, 1), lambda: None)


def test_missing_segment_is_named(mapper: StoreMapper) -> None:
    with pytest.raises(ValueError, match="seg-999999"):
        mapper.writable(Location("seg-999999", 0, 1))


def test_close_with_live_views_leaves_them_readable(arena: Arena, mapper: StoreMapper) -> None:
    loc = new_location(arena, 5000)
    with mapper.writable(loc) as w:
        w[:5] = b"hello"
    view = mapper.readable(loc, lambda: None)
    mapper.close()
    assert bytes(view[:5]) == b"hello"
    with pytest.raises(ValueError, match="closed"):
        mapper.writable(loc)


def test_mappings_of_removed_segments_are_dropped_on_the_next_new_mapping(
    tmp_path: Path, mapper: StoreMapper
) -> None:
    arena = Arena(str(tmp_path), 8 * MiB, segment_size=4 * MiB)
    first = new_location(arena, 4 * MiB)
    with mapper.writable(first):
        pass
    arena.free(first.segment, first.offset)
    second = new_location(arena, 6 * MiB)  # trades the empty segment for a larger one
    assert not os.path.exists(tmp_path / first.segment)
    with mapper.writable(second):
        pass
    assert mapper.mapped_segments == [second.segment]
    arena.close()


def test_zero_size_object_gives_an_empty_view(arena: Arena, mapper: StoreMapper) -> None:
    loc = new_location(arena, 0)
    released: list[int] = []
    view = mapper.readable(loc, lambda: released.append(1))
    assert len(view) == 0
    assert len(mapper.writable(loc)) == 0
    del view
    gc.collect()
    assert released == [1]
