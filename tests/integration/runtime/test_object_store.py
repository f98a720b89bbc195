"""Large objects in the node's memory-mapped store: zero-copy reads on the same node, torch
tensors, and distributed reference counting (the store frees an object once the last
reference anywhere is gone, and borrowers keep it alive)."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import torch
from runtime_fixtures import wait_until

import zmesh
from zmesh.runtime import context
from zmesh.store.sweep import default_store_root

MB = 1 << 20


def store_stats() -> dict[str, int]:
    """The node's StoreStats as a dict (capacity, used, num_objects, spilled_objects, ...)."""
    return dict(context.current_client().query("store"))


def mapping_of(address: int) -> str:
    """The file backing the mapping that holds `address` in this process ('' if anonymous)."""
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(maxsplit=5)
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            if lo <= address < hi:
                return parts[5].strip() if len(parts) > 5 else ""
    raise AssertionError(f"address {address:#x} is not mapped")


def test_get_of_a_large_array_is_a_read_only_view_into_the_shared_store(ray):
    arr = np.arange(20 * MB // 8, dtype=np.float64)
    ref = ray.put(arr)
    got = ray.get(ref)
    assert np.array_equal(got, arr)
    assert got.flags.writeable is False
    assert got.flags.owndata is False
    assert mapping_of(got.ctypes.data).startswith(default_store_root() + "/")
    with pytest.raises(ValueError, match="read-only"):
        got[0] = 1.0


def test_two_gets_of_one_object_share_one_buffer(ray):
    ref = ray.put(np.ones(20 * MB // 8))
    a, b = ray.get(ref), ray.get(ref)
    assert a.ctypes.data == b.ctypes.data
    assert np.shares_memory(a, b)


def test_a_task_reads_a_large_put_array_without_changing_it(ray):
    @ray.remote
    def describe(a):
        return float(a.sum()), a.flags.writeable, a.flags.owndata

    arr = np.full(20 * MB // 8, 2.0)
    total, writeable, owndata = ray.get(describe.remote(ray.put(arr)))
    assert total == 2.0 * arr.size
    assert (writeable, owndata) == (False, False)


def test_small_values_are_inlined_and_stay_out_of_the_store(ray):
    before = store_stats()["num_objects"]
    refs = [ray.put(np.arange(100)) for _ in range(10)]
    assert store_stats()["num_objects"] == before
    assert all(np.array_equal(ray.get(r), np.arange(100)) for r in refs)


@pytest.mark.parametrize("shape", [(3, 4), (1024, 1024, 5)], ids=["small", "20MB"])
def test_torch_cpu_tensors_round_trip(ray, shape):
    t = torch.arange(int(np.prod(shape)), dtype=torch.float32).reshape(shape)
    got = ray.get(ray.put(t))
    assert isinstance(got, torch.Tensor)
    assert got.dtype == torch.float32 and got.shape == t.shape
    assert torch.equal(got, t)

    @ray.remote
    def double(x):
        return x * 2

    assert torch.equal(ray.get(double.remote(t)), t * 2)


def test_dropping_the_last_ref_frees_the_object_in_the_store(ray):
    gc.collect()
    before = store_stats()["used"]
    ref = ray.put(np.zeros(20 * MB, dtype=np.uint8))
    assert store_stats()["used"] >= 20 * MB  # earlier tests' frees may land meanwhile
    del ref
    assert wait_until(lambda: store_stats()["used"] <= before), store_stats()


def test_an_object_is_freed_only_when_the_last_view_of_it_dies(ray):
    gc.collect()
    before = store_stats()["used"]
    ref = ray.put(np.zeros(20 * MB, dtype=np.uint8))
    view = ray.get(ref)
    del ref
    assert view.sum() == 0  # still mapped and intact after the ref went
    assert store_stats()["used"] >= 20 * MB  # earlier tests' frees may land meanwhile
    del view
    assert wait_until(lambda: store_stats()["used"] <= before), store_stats()


def test_a_large_task_result_is_freed_when_its_ref_goes(ray):
    @ray.remote
    def make():
        return np.ones(20 * MB, dtype=np.uint8)

    gc.collect()
    before = store_stats()["used"]
    ref = make.remote()
    assert ray.get(ref).sum() == 20 * MB
    assert store_stats()["used"] >= 20 * MB  # earlier tests' frees may land meanwhile
    del ref
    gc.collect()
    assert wait_until(lambda: store_stats()["used"] <= before), store_stats()


def test_a_ref_passed_into_a_task_outlives_the_drivers_own_ref(ray):
    @ray.remote
    def total_later(box):
        return int(ray.get(box[0]).sum())

    ref = ray.put(np.ones(20 * MB, dtype=np.uint8))
    out = total_later.remote([ref])
    del ref
    gc.collect()
    assert ray.get(out) == 20 * MB


def test_a_ref_stored_in_an_actor_keeps_the_object_alive_until_the_actor_drops_it(ray):
    @ray.remote
    class Holder:
        def __init__(self):
            self.box = None

        def hold(self, box):
            self.box = box

        def total(self):
            return int(ray.get(self.box[0]).sum())

        def drop(self):
            self.box = None

    holder = Holder.remote()
    gc.collect()
    before = store_stats()["used"]
    ref = ray.put(np.ones(20 * MB, dtype=np.uint8))
    ray.get(holder.hold.remote([ref]))
    del ref
    gc.collect()
    assert ray.get(holder.total.remote()) == 20 * MB
    assert store_stats()["used"] >= 20 * MB  # the actor borrows it (earlier frees may land meanwhile)
    ray.get(holder.drop.remote())
    assert wait_until(lambda: store_stats()["used"] <= before), store_stats()
    ray.kill(holder)


def test_a_ref_returned_inside_a_task_result_keeps_its_object_alive(ray):
    @ray.remote
    def make():
        return [ray.put(np.full(20 * MB, 3, dtype=np.uint8))]

    outer = make.remote()
    (inner,) = ray.get(outer)
    del outer
    gc.collect()
    assert int(ray.get(inner)[-1]) == 3


def test_a_ref_returned_inside_a_task_result_is_freed_once_every_ref_is_gone(ray):
    @ray.remote
    def make():
        return [ray.put(np.full(20 * MB, 3, dtype=np.uint8))]

    gc.collect()
    before = store_stats()["used"]
    outer = make.remote()
    (inner,) = ray.get(outer)
    assert int(ray.get(inner)[-1]) == 3
    del inner, outer
    gc.collect()
    assert wait_until(lambda: store_stats()["used"] <= before), store_stats()


def test_a_large_object_inside_a_put_container_is_freed_with_the_container(ray):
    gc.collect()
    before = store_stats()["used"]
    outer = ray.put([ray.put(np.full(20 * MB, 5, dtype=np.uint8))])
    (inner,) = ray.get(outer)
    del outer
    gc.collect()
    assert int(ray.get(inner)[0]) == 5  # our own ref still holds it
    assert store_stats()["used"] >= 20 * MB  # earlier tests' frees may land meanwhile
    del inner
    gc.collect()
    assert wait_until(lambda: store_stats()["used"] <= before), store_stats()


def test_a_ref_taken_out_of_a_put_container_can_be_read_by_a_task(ray):
    @ray.remote
    def read(box):
        return ray.get(box[0])

    # the inner ref lives only inside the put container, which the task borrows
    outer = ray.put([ray.put("kept by the container")])
    assert ray.get(read.remote(ray.get(outer))) == "kept by the container"


def test_each_large_put_holds_one_store_object_until_dropped(ray):
    gc.collect()
    before = store_stats()
    refs = [ray.put(np.full(2 * MB, i, dtype=np.uint8)) for i in range(10)]
    mid = store_stats()
    assert mid["num_objects"] == before["num_objects"] + 10
    assert [int(ray.get(r)[0]) for r in refs] == list(range(10))
    del refs
    assert wait_until(lambda: store_stats()["num_objects"] == before["num_objects"])


def test_object_store_stats_are_visible_to_the_driver(ray):
    stats = store_stats()
    assert stats["capacity"] > 0
    assert 0 <= stats["used"] <= stats["capacity"]
    # the resource is the configured budget; the store rounds its capacity down to pages
    assert zmesh.cluster_resources()["object_store_memory"] == pytest.approx(stats["capacity"],
                                                                             abs=1 << 16)
