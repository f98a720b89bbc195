"""Objects through the public API: put, get, wait and refs inside containers, as Ray users
write them (including the seed programs: `wait` over many refs and sum_matrix)."""

from __future__ import annotations

import numpy as np
import pytest

import zmesh


def test_put_then_get_returns_the_value(ray):
    value = {"a": [1, 2, 3], "b": ("x", None), "c": 1.5}
    assert ray.get(ray.put(value)) == value


def test_get_of_a_list_returns_values_in_the_order_of_the_refs(ray):
    refs = [ray.put(i * 10) for i in range(20)]
    assert ray.get(refs) == [i * 10 for i in range(20)]
    assert ray.get(tuple(refs[:3])) == [0, 10, 20]


def test_get_of_an_empty_list_is_an_empty_list(ray):
    assert ray.get([]) == []


def test_get_with_timeout_raises_get_timeout_error(ray):
    @ray.remote
    def slow():
        import time

        time.sleep(2)

    with pytest.raises(zmesh.exceptions.GetTimeoutError, match="timed out"):
        ray.get(slow.remote(), timeout=0.05)
    with pytest.raises(zmesh.exceptions.GetTimeoutError):
        ray.get([ray.put(1), slow.remote()], timeout=0.05)


def test_get_of_something_that_is_not_a_ref_is_an_error_as_in_ray(ray):
    # Ray 2.x (worker.get): a non-ref, non-list argument is a ValueError; a list holding a
    # non-ref is a TypeError naming the value
    with pytest.raises(ValueError, match="must either be an ObjectRef or a list"):
        ray.get(3)
    with pytest.raises(TypeError, match="int"):
        ray.get([ray.put(1), 3])


def test_put_of_a_ref_is_refused(ray):
    with pytest.raises(TypeError, match="ObjectRef"):
        ray.put(ray.put(1))


def test_refs_nested_in_a_put_container_stay_refs(ray):
    inner = [ray.put(i) for i in range(3)]
    outer = ray.put({"refs": inner, "n": 3})
    got = ray.get(outer)
    assert got["n"] == 3
    assert all(isinstance(r, zmesh.ObjectRef) for r in got["refs"])
    assert ray.get(got["refs"]) == [0, 1, 2]


def test_a_container_of_refs_keeps_the_inner_objects_alive(ray):
    outer = ray.put([ray.put("inner value")])  # the inner ref is dropped at once here
    (inner,) = ray.get(outer)
    assert ray.get(inner) == "inner value"


def test_wait_splits_refs_into_ready_and_not_ready(ray):
    @ray.remote
    def slow():
        import time

        time.sleep(3)

    done = [ray.put(i) for i in range(3)]
    pending = slow.remote()
    ready, not_ready = ray.wait([done[0], pending, done[1], done[2]], num_returns=3)
    assert ready == done
    assert not_ready == [pending]
    ray.cancel(pending)


def test_wait_returns_at_most_num_returns_ready_refs_in_input_order(ray):
    refs = [ray.put(i) for i in range(5)]
    ready, not_ready = ray.wait(refs, num_returns=2)
    assert ready == refs[:2]
    assert not_ready == refs[2:]


def test_wait_with_timeout_returns_what_is_ready_so_far(ray):
    @ray.remote
    def slow():
        import time

        time.sleep(3)

    fast = ray.put("fast")
    pending = slow.remote()
    ready, not_ready = ray.wait([pending, fast], num_returns=2, timeout=0.1)
    assert ready == [fast]
    assert not_ready == [pending]
    ready, not_ready = ray.wait([pending], timeout=0)
    assert (ready, not_ready) == ([], [pending])
    ray.cancel(pending)


def test_wait_blocks_until_a_task_finishes(ray):
    @ray.remote
    def quick(x):
        return x

    ref = quick.remote(7)
    ready, not_ready = ray.wait([ref])
    assert ready == [ref] and not_ready == []
    assert ray.get(ready[0]) == 7


def test_wait_counts_failed_tasks_as_ready(ray):
    @ray.remote
    def fail():
        raise ValueError("boom")

    ref = fail.remote()
    ready, _ = ray.wait([ref], timeout=10)
    assert ready == [ref]
    with pytest.raises(ValueError, match="boom"):
        ray.get(ref)


def test_wait_refuses_duplicates_bad_num_returns_and_a_single_ref(ray):
    ref = ray.put(1)
    with pytest.raises(ValueError, match="duplicate"):
        ray.wait([ref, ref], num_returns=1)
    with pytest.raises(ValueError, match="num_returns"):
        ray.wait([ref], num_returns=2)
    with pytest.raises(ValueError, match="num_returns"):
        ray.wait([ref], num_returns=-1)
    with pytest.raises(TypeError, match="list"):
        ray.wait(ref)


def test_seed_wait_over_many_refs_collects_every_result(ray):
    @ray.remote
    def work(i):
        import time

        time.sleep((i % 5) / 1000)
        return i

    refs = [work.remote(i) for i in range(100)]
    results = []
    while refs:
        ready, refs = ray.wait(refs)
        assert len(ready) == 1
        results.append(ray.get(ready[0]))
    assert sorted(results) == list(range(100))


def test_seed_wait_with_num_returns_in_batches(ray):
    @ray.remote
    def work(i):
        return i * i

    refs = [work.remote(i) for i in range(30)]
    seen = []
    while refs:
        ready, refs = ray.wait(refs, num_returns=min(10, len(refs)))
        assert len(ready) == min(10, len(ready) + len(refs))
        seen.extend(ray.get(ready))
    assert sorted(seen) == [i * i for i in range(30)]


def test_seed_sum_matrix_with_a_literal_array_and_with_a_put_ref(ray):
    @ray.remote
    def sum_matrix(matrix):
        return np.sum(matrix)

    assert ray.get(sum_matrix.remote(np.ones((100, 100)))) == 10000.0
    matrix_ref = ray.put(np.ones((1000, 1000)))
    assert ray.get(sum_matrix.remote(matrix_ref)) == 1_000_000.0


def test_a_task_can_put_and_return_a_ref_the_driver_reads(ray):
    @ray.remote
    def make():
        return [ray.put("made inside")]

    (ref,) = ray.get(make.remote())
    assert ray.get(ref) == "made inside"


def test_a_ref_passed_in_a_list_to_a_task_is_read_there(ray):
    ref = ray.put(np.arange(10))

    @ray.remote
    def total(box):
        return int(ray.get(box[0]).sum())

    assert ray.get(total.remote([ref])) == 45


def test_object_ref_looks_like_rays(ray):
    ref = ray.put(5)
    assert isinstance(ref, zmesh.ObjectRef)
    assert ref == zmesh.ObjectRef(ref.binary(), ref.owner, ref._client)
    assert ref != ray.put(5)  # same value, another object
    assert ref.hex() == ref.binary().hex()
    assert ref in {ref}
    assert ref.future().result(timeout=10) == 5


def test_wait_for_all_of_many_short_tasks_never_misses_one(ray):
    # values land while wait registers its callbacks: none may be missed (it hung once)
    @ray.remote
    def nap(s):
        import time

        time.sleep(s)
        return s

    for _ in range(5):
        refs = [nap.remote(0.0005 * (i % 4)) for i in range(300)]
        ready, rest = ray.wait(refs, num_returns=len(refs), timeout=60)
        assert len(ready) == 300 and rest == []
