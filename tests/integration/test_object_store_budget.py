"""The object store under real sizes: disk use stays within the budget, spilled data survives."""

from __future__ import annotations

import gc
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from zmesh.store.mapping import StoreMapper
from zmesh.store.object_store import ObjectStore

MiB = 1 << 20
CAPACITY = 256 * MiB
BOOKKEEPING = 2 * 4096
"""A page each, at most, for the small files beside the segments (spill-dir record, owner)."""


@pytest.fixture
def store(tmp_path: Path) -> Iterator[tuple[ObjectStore, StoreMapper]]:
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    directory = tempfile.mkdtemp(prefix="zmesh-test-", dir=base)
    s = ObjectStore(os.path.join(directory, "node"), CAPACITY, spill_dir=str(tmp_path))
    m = StoreMapper(s.directory)
    yield s, m
    m.close()
    s.close()
    leftovers = os.listdir(directory)
    shutil.rmtree(directory, ignore_errors=True)
    assert leftovers == [], "close() left files behind"
    assert os.listdir(tmp_path) == [], "close() left spill files behind"


def disk_usage(directory: str) -> int:
    return sum(os.stat(e.path).st_blocks * 512 for e in os.scandir(directory))


def content(i: int, size: int) -> np.ndarray:
    """Bytes that differ for every object and every position."""
    return (np.arange(size // 8, dtype=np.uint64) + (i << 40)).view(np.uint8)


def test_putting_50_objects_of_100_mb_while_dropping_them_keeps_disk_use_bounded(
    store: tuple[ObjectStore, StoreMapper],
) -> None:
    s, m = store
    size = 100_000_000
    src = content(0, size)
    peak = 0
    segments_seen: set[str] = set()
    for i in range(50):
        oid = i.to_bytes(20, "big")
        loc = s.allocate(oid, size, owner="driver")
        segments_seen.add(loc.segment)
        with m.writable(loc) as view:
            np.copyto(np.frombuffer(view, dtype=np.uint8), src)
        s.seal(oid)
        peak = max(peak, disk_usage(s.directory))
        if i % 10 == 9:
            pinned = s.pin(oid, "reader")
            view = m.readable(pinned, lambda: None)
            assert np.array_equal(np.frombuffer(view, np.uint8), src)
            del view
            s.unpin(oid, "reader")
        s.free(oid)
    assert peak <= CAPACITY + BOOKKEEPING
    assert len(segments_seen) == 1, "freed space is reused, not new files"
    stats = s.stats()
    assert stats.used == 0 and stats.spill_count == 0


def test_filling_past_the_budget_spills_and_every_object_reads_back_intact(
    store: tuple[ObjectStore, StoreMapper],
) -> None:
    s, m = store
    size = 64 * MiB
    ids = [i.to_bytes(20, "big") for i in range(10)]
    for i, oid in enumerate(ids):
        loc = s.allocate(oid, size, owner="driver")
        with m.writable(loc) as view:
            np.copyto(np.frombuffer(view, dtype=np.uint8), content(i, size))
        s.seal(oid)
        assert disk_usage(s.directory) <= CAPACITY + BOOKKEEPING
    stats = s.stats()
    assert stats.num_objects == 10
    assert stats.spilled_objects == 6 and stats.spilled_bytes == 6 * size

    released: list[int] = []
    for i, oid in enumerate(ids):
        loc = s.pin(oid, "reader")
        view = m.readable(loc, lambda: released.append(1))
        assert np.array_equal(np.frombuffer(view, np.uint8), content(i, size)), f"object {i}"
        del view
        gc.collect()
        s.unpin(oid, "reader")
        assert disk_usage(s.directory) <= CAPACITY + BOOKKEEPING
    assert len(released) == 10
    assert s.stats().restore_count >= 6
