"""The store budget (`init(object_store_memory=...)`): freed objects make room, so usage
stays bounded; past the budget, referenced objects spill to disk and read back intact."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import numpy as np
import pytest
from runtime_fixtures import wait_until

import zmesh
from zmesh.runtime import context

MB = 1 << 20
BUDGET = 200 * MB


@pytest.fixture(scope="module")
def small_store() -> Iterator[None]:
    zmesh.init(num_cpus=1, object_store_memory=BUDGET)
    yield
    zmesh.shutdown()


def store_stats() -> dict[str, int]:
    return dict(context.current_client().query("store"))


def test_putting_50_large_objects_while_dropping_them_keeps_the_store_bounded(small_store):
    peak = 0
    for i in range(50):
        ref = zmesh.put(np.full(20 * MB, i % 251, dtype=np.uint8))
        assert int(zmesh.get(ref)[-1]) == i % 251
        del ref
        peak = max(peak, store_stats()["segment_bytes"])
    gc.collect()
    assert peak <= BUDGET
    assert wait_until(lambda: store_stats()["num_objects"] == 0), store_stats()
    assert store_stats()["spilled_objects"] == 0


def test_filling_past_the_budget_spills_and_every_object_reads_back(small_store):
    refs = [zmesh.put(np.full(20 * MB, i, dtype=np.uint8)) for i in range(15)]  # 300 MB
    stats = store_stats()
    assert stats["spilled_objects"] > 0, stats
    assert stats["segment_bytes"] <= BUDGET
    for i, ref in enumerate(refs):
        arr = zmesh.get(ref)
        assert arr.shape == (20 * MB,)
        assert int(arr[0]) == i and int(arr[-1]) == i and int(arr[10 * MB]) == i
        del arr
    assert store_stats()["restore_count"] > 0
    del refs, ref
    gc.collect()
    assert wait_until(lambda: store_stats()["num_objects"] == 0), store_stats()


def test_a_task_reads_a_spilled_argument(small_store):
    @zmesh.remote
    def first_and_last(a):
        return int(a[0]), int(a[-1])

    refs = [zmesh.put(np.full(20 * MB, i, dtype=np.uint8)) for i in range(12)]
    assert store_stats()["spilled_objects"] > 0
    assert zmesh.get(first_and_last.remote(refs[0])) == (0, 0)
    del refs


def test_a_reader_keeps_one_pin_between_gets_and_gives_it_back_when_the_object_is_freed(
        small_store):
    """get_large: the second get of a stored object asks the node nothing (the reader kept
    its pin); freeing the object asks the pin back, so nothing stays stored."""
    client = context.current_client()
    ref = zmesh.put(np.full(20 * MB, 7, dtype=np.uint8))
    for _ in range(3):
        arr = zmesh.get(ref)
        assert int(arr[-1]) == 7
        del arr
    gc.collect()
    assert ref.binary() in client.pins.idle()
    assert store_stats()["num_pinned"] == 1
    del ref
    gc.collect()
    assert wait_until(lambda: store_stats()["num_objects"] == 0), store_stats()
    assert store_stats()["num_pinned"] == 0
