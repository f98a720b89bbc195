"""ObjectStore: object life (allocate, seal, pin, free), the budget, eviction and spill."""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from zmesh.errors import ObjectLostError, ObjectStoreFullError
from zmesh.store.mapping import StoreMapper
from zmesh.store.object_store import ObjectStore

KiB = 1 << 10
SIZE = 100 * KiB  # one object; the store below holds 4 of them (plus rounding)
CAPACITY = 4 * 104 * KiB


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ObjectStore]:
    s = ObjectStore(
        str(tmp_path / "store"), CAPACITY, spill_dir=str(tmp_path / "spill"), segment_size=CAPACITY
    )
    yield s
    s.close()


@pytest.fixture
def mapper(store: ObjectStore) -> Iterator[StoreMapper]:
    m = StoreMapper(store.directory)
    yield m
    m.close()


def oid(i: int) -> bytes:
    return i.to_bytes(4, "big") * 5


def put(store: ObjectStore, mapper: StoreMapper, i: int, *, size: int = SIZE) -> bytes:
    """Write object i, filled with a pattern only it has, and seal it."""
    loc = store.allocate(oid(i), size, owner="driver")
    with mapper.writable(loc) as view:
        view[:] = pattern(i, size)
    store.seal(oid(i))
    return oid(i)


def pattern(i: int, size: int) -> bytes:
    return (np.arange(size, dtype=np.uint32) * 2654435761 + i).astype(np.uint8).tobytes()


def read(store: ObjectStore, mapper: StoreMapper, object_id: bytes) -> bytes:
    loc = store.pin(object_id, "reader")
    released: list[bool] = []
    view = mapper.readable(loc, lambda: released.append(True))
    data = bytes(view)
    del view
    gc.collect()
    assert released
    store.unpin(object_id, "reader")
    return data


def test_sealed_object_can_be_pinned_and_read_back(store: ObjectStore, mapper: StoreMapper) -> None:
    put(store, mapper, 1)
    assert store.contains(oid(1))
    assert read(store, mapper, oid(1)) == pattern(1, SIZE)
    assert store.stats().num_pinned == 0


def test_pin_of_an_unknown_object_raises_object_lost(store: ObjectStore) -> None:
    with pytest.raises(ObjectLostError, match=oid(9).hex()):
        store.pin(oid(9), "reader")


def test_pin_before_seal_is_refused(store: ObjectStore) -> None:
    store.allocate(oid(1), SIZE, owner="driver")
    assert not store.is_sealed(oid(1))
    with pytest.raises(ValueError, match="not sealed"):
        store.pin(oid(1), "reader")
    store.seal(oid(1))
    assert store.is_sealed(oid(1))
    store.pin(oid(1), "reader")


def test_allocating_an_existing_id_is_refused(store: ObjectStore) -> None:
    store.allocate(oid(1), SIZE, owner="driver")
    with pytest.raises(ValueError, match="already in the store"):
        store.allocate(oid(1), SIZE, owner="driver")


@pytest.mark.parametrize("bad_id", [b"", b"x" * 65, "not-bytes"])
def test_bad_object_ids_are_refused(store: ObjectStore, bad_id: object) -> None:
    with pytest.raises(ValueError, match="object id"):
        store.allocate(bad_id, SIZE, owner="driver")  # type: ignore[arg-type]


def test_negative_size_is_refused(store: ObjectStore) -> None:
    with pytest.raises(ValueError, match="size"):
        store.allocate(oid(1), -5, owner="driver")


def test_unpin_without_a_pin_names_client_and_object(
    store: ObjectStore, mapper: StoreMapper
) -> None:
    put(store, mapper, 1)
    with pytest.raises(ValueError, match="'reader'.*" + oid(1).hex()):
        store.unpin(oid(1), "reader")


def test_pins_count_per_client(store: ObjectStore, mapper: StoreMapper) -> None:
    put(store, mapper, 1)
    store.pin(oid(1), "a")
    store.pin(oid(1), "a")
    store.unpin(oid(1), "a")
    assert store.stats().num_pinned == 1
    store.unpin(oid(1), "a")
    assert store.stats().num_pinned == 0


def test_free_releases_space(store: ObjectStore, mapper: StoreMapper) -> None:
    put(store, mapper, 1)
    assert store.stats().used > 0
    assert store.free(oid(1))
    assert store.stats().used == 0
    assert not store.contains(oid(1))
    assert not store.free(oid(1)), "a second free reports that nothing was there"


def test_freeing_a_pinned_object_keeps_its_space_until_the_last_unpin(
    store: ObjectStore, mapper: StoreMapper
) -> None:
    put(store, mapper, 1)
    store.pin(oid(1), "a")
    store.pin(oid(1), "b")
    store.free(oid(1))
    assert not store.contains(oid(1))
    with pytest.raises(ObjectLostError):
        store.pin(oid(1), "c")
    used = store.stats().used
    store.unpin(oid(1), "a")
    assert store.stats().used == used
    store.unpin(oid(1), "b")
    assert store.stats().used == 0


def test_release_client_drops_its_pins_and_its_unsealed_objects(
    store: ObjectStore, mapper: StoreMapper
) -> None:
    put(store, mapper, 1)
    store.pin(oid(1), "worker-7")
    store.pin(oid(1), "worker-7")
    store.pin(oid(1), "other")
    store.allocate(oid(2), SIZE, owner="worker-7")
    store.release_client("worker-7")
    assert not store.contains(oid(2))
    assert store.stats().num_pinned == 1
    store.unpin(oid(1), "other")
    assert store.stats().num_pinned == 0
    assert store.contains(oid(1))


def test_release_client_frees_objects_freed_while_it_pinned_them(
    store: ObjectStore, mapper: StoreMapper
) -> None:
    put(store, mapper, 1)
    store.pin(oid(1), "worker-7")
    store.free(oid(1))
    store.release_client("worker-7")
    assert store.stats().used == 0


def test_secondary_copies_are_evicted_before_any_primary_is_spilled(
    store: ObjectStore, mapper: StoreMapper
) -> None:
    put(store, mapper, 1)  # primary, least recently used
    put(store, mapper, 2)
    store.mark_secondary(oid(2))
    put(store, mapper, 3)
    put(store, mapper, 4)
    store.mark_secondary(oid(4))
    put(store, mapper, 5)  # over budget: one object must go
    assert store.take_evicted() == [oid(2)]
    assert not store.contains(oid(2))
    stats = store.stats()
    assert stats.evicted_count == 1 and stats.spill_count == 0
    put(store, mapper, 6)
    assert store.take_evicted() == [oid(4)]
    put(store, mapper, 7)  # no secondaries left: the LRU primary is spilled
    assert store.take_evicted() == []
    assert store.is_spilled(oid(1))
    assert store.stats().spill_count == 1


def test_spilled_object_is_restored_intact_on_pin(store: ObjectStore, mapper: StoreMapper) -> None:
    for i in range(8):
        put(store, mapper, i)
    stats = store.stats()
    assert stats.spilled_objects == 4 and stats.spilled_bytes == 4 * SIZE
    assert len(os.listdir(stats_spill_dir(store))) == 4
    for i in range(8):
        assert read(store, mapper, oid(i)) == pattern(i, SIZE), f"object {i} changed"
    assert store.stats().restore_count >= 4
    assert store.stats().used <= CAPACITY


def stats_spill_dir(store: ObjectStore) -> str:
    with open(os.path.join(store.directory, "spill-dir")) as f:
        return f.read().strip()


def test_reading_refreshes_recency_so_the_least_recently_read_is_spilled(
    store: ObjectStore, mapper: StoreMapper
) -> None:
    for i in range(4):
        put(store, mapper, i)
    read(store, mapper, oid(0))
    put(store, mapper, 4)
    assert store.is_spilled(oid(1))
    assert not store.is_spilled(oid(0))


def test_pinned_objects_are_never_moved_and_a_full_store_says_why(
    store: ObjectStore, mapper: StoreMapper
) -> None:
    locs = []
    for i in range(4):
        put(store, mapper, i)
        locs.append(store.pin(oid(i), "reader"))
    with pytest.raises(ObjectStoreFullError) as err:
        store.allocate(oid(9), SIZE, owner="driver")
    message = str(err.value)
    assert str(SIZE) in message and str(CAPACITY) in message and "pinned" in message
    assert [store.pin(oid(i), "reader") for i in range(4)] == locs
    assert store.stats().spill_count == 0


def test_unsealed_objects_are_never_moved(store: ObjectStore) -> None:
    for i in range(4):
        store.allocate(oid(i), SIZE, owner="driver")
    with pytest.raises(ObjectStoreFullError, match="being written"):
        store.allocate(oid(9), SIZE, owner="driver")


def test_object_larger_than_capacity_is_refused_without_moving_anything(
    store: ObjectStore, mapper: StoreMapper
) -> None:
    put(store, mapper, 1)
    with pytest.raises(ObjectStoreFullError, match=str(CAPACITY + 1)):
        store.allocate(oid(2), CAPACITY + 1, owner="driver")
    assert not store.is_spilled(oid(1))


def test_spill_file_lost_turns_into_object_lost(store: ObjectStore, mapper: StoreMapper) -> None:
    for i in range(5):
        put(store, mapper, i)
    assert store.is_spilled(oid(0))
    os.unlink(os.path.join(stats_spill_dir(store), oid(0).hex()))
    with pytest.raises(ObjectLostError, match="gone"):
        store.pin(oid(0), "reader")
    assert not store.contains(oid(0))
    # Making room for the restore spilled one more; the lost object's space came back.
    assert store.stats().used == 3 * SIZE


def test_close_removes_segments_spill_files_and_directories(tmp_path: Path) -> None:
    store = ObjectStore(str(tmp_path / "store"), CAPACITY, spill_dir=str(tmp_path / "spill"))
    mapper = StoreMapper(store.directory)
    for i in range(6):
        put(store, mapper, i)
    spill = stats_spill_dir(store)
    assert os.listdir(spill)
    mapper.close()
    store.close()
    assert not os.path.exists(store.directory)
    assert not os.path.exists(spill)
    assert os.listdir(tmp_path / "spill") == []


def test_close_keeps_a_directory_it_did_not_make(tmp_path: Path) -> None:
    store = ObjectStore(str(tmp_path), CAPACITY)
    store.allocate(oid(1), SIZE, owner="driver")
    store.close()
    assert os.listdir(tmp_path) == []
