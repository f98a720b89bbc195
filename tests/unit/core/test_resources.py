"""ResourceSet fixed point, validation, and GPU id assignment."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zmesh.core.gpu_ids import GpuIdPool
from zmesh.core.resources import (
    SCALE,
    NodeResources,
    ResourceSet,
    check_request_amounts,
    explain_shortfall,
    labels_match,
)


def test_amounts_round_trip_as_floats() -> None:
    rs = ResourceSet.from_dict({"CPU": 2, "GPU": 0.5, "memory": 1e9, "TPU-v4": 0.25})
    assert rs.to_dict() == {"CPU": 2.0, "GPU": 0.5, "memory": 1e9, "TPU-v4": 0.25}
    assert rs["GPU"] == SCALE // 2


def test_zero_amounts_are_dropped_so_empty_sets_compare_equal() -> None:
    assert ResourceSet.from_dict({"CPU": 0}) == ResourceSet()
    assert ResourceSet.from_dict({"CPU": 0}).is_empty()


def test_ten_tenths_free_exactly_one() -> None:
    tenth = ResourceSet.from_dict({"GPU": 0.1})
    whole = ResourceSet.from_dict({"GPU": 1})
    left = whole
    for _ in range(10):
        left = left - tenth
    assert left.is_empty()
    back = ResourceSet()
    for _ in range(10):
        back = back + tenth
    assert back == whole


@pytest.mark.parametrize(
    ("amounts", "named"),
    [
        ({"CPU": -1}, "'CPU'"),
        ({"GPU": float("nan")}, "'GPU'"),
        ({"GPU": math.inf}, "'GPU'"),
        ({"CPU": "2"}, "'CPU'"),
        ({"CPU": True}, "'CPU'"),
        ({"": 1}, "''"),
        ({" CPU": 1}, "' CPU'"),
        ({3: 1}, "3"),
        ({"custom": 0.00001}, "'custom'"),
    ],
)
def test_bad_amounts_raise_value_error_naming_the_key(amounts: dict, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        ResourceSet.from_dict(amounts)


def test_a_non_mapping_is_refused() -> None:
    with pytest.raises(ValueError, match="dict"):
        ResourceSet.from_dict([("CPU", 1)])  # type: ignore[arg-type]


def test_requests_above_one_must_be_whole() -> None:
    check_request_amounts(ResourceSet.from_dict({"GPU": 0.5, "CPU": 3}), "task")
    with pytest.raises(ValueError, match="'GPU' amount 1.5"):
        check_request_amounts(ResourceSet.from_dict({"GPU": 1.5}), "task")


def test_subtracting_more_than_there_is_raises() -> None:
    with pytest.raises(ValueError, match="'CPU'"):
        ResourceSet.from_dict({"CPU": 1}) - ResourceSet.from_dict({"CPU": 2})


def test_fits_in_checks_every_resource() -> None:
    need = ResourceSet.from_dict({"CPU": 1, "GPU": 1})
    assert need.fits_in(ResourceSet.from_dict({"CPU": 4, "GPU": 1}))
    assert not need.fits_in(ResourceSet.from_dict({"CPU": 4}))
    assert ResourceSet().fits_in(ResourceSet())


def test_union_max_takes_the_larger_amount_per_resource() -> None:
    a = ResourceSet.from_dict({"CPU": 1, "GPU": 0.5})
    b = ResourceSet.from_dict({"CPU": 0.5, "x": 1})
    assert a.union_max(b).to_dict() == {"CPU": 1.0, "GPU": 0.5, "x": 1.0}


def test_shortfall_names_the_resource_and_the_largest_node() -> None:
    need = ResourceSet.from_dict({"GPU": 1, "CPU": 1})
    caps = {"a": ResourceSet.from_dict({"CPU": 8}), "b": ResourceSet.from_dict({"CPU": 2})}
    missing, reason = explain_shortfall(need, caps)
    assert missing == [("GPU", SCALE, 0)]
    assert "GPU need 1, largest node has 0" in reason


def test_shortfall_names_the_closest_node_when_resources_exist_only_apart() -> None:
    need = ResourceSet.from_dict({"GPU": 1, "CPU": 4})
    caps = {"a": ResourceSet.from_dict({"CPU": 8}), "b": ResourceSet.from_dict({"CPU": 2, "GPU": 1})}
    missing, reason = explain_shortfall(need, caps)
    assert "no single node" in reason
    assert missing in ([("GPU", SCALE, 0)], [("CPU", 4 * SCALE, 2 * SCALE)])


def test_node_resources_default_to_all_free() -> None:
    node = NodeResources.of({"CPU": 4}, labels={"zone": "a"})
    assert node.available == node.total
    assert node.to_wire() == {"total": {"CPU": 4.0}, "available": {"CPU": 4.0}, "labels": {"zone": "a"}}


def test_labels_match_only_when_every_wanted_label_is_equal() -> None:
    assert labels_match({}, {"zone": "a"})
    assert labels_match({"zone": "a"}, {"zone": "a", "gpu": "h100"})
    assert not labels_match({"zone": "b"}, {"zone": "a"})
    assert not labels_match({"rack": "1"}, {"zone": "a"})


amounts = st.integers(min_value=0, max_value=40 * SCALE).map(lambda v: v / SCALE)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from(["CPU", "GPU", "x"]), amounts), max_size=12))
def test_adding_then_subtracting_any_sets_gives_back_exactly_zero(parts: list[dict]) -> None:
    sets = [ResourceSet.from_dict(p) for p in parts]
    total = ResourceSet()
    for s in sets:
        total = total + s
    for s in reversed(sets):
        total = total - s
    assert total.is_empty()


# ---------------------------------------------------------------------------- GPU ids


def test_a_node_with_n_gpus_has_ids_zero_to_n_minus_one() -> None:
    pool = GpuIdPool.for_count(4 * SCALE)
    assert sorted(pool.free()) == [0, 1, 2, 3]


def test_a_node_cannot_have_a_fraction_of_a_gpu() -> None:
    with pytest.raises(ValueError, match="whole GPUs"):
        GpuIdPool.for_count(SCALE // 2)


def test_whole_gpu_requests_get_distinct_ids() -> None:
    pool = GpuIdPool.for_count(4 * SCALE)
    a = pool.acquire(2 * SCALE)
    b = pool.acquire(2 * SCALE)
    assert a is not None and b is not None
    assert len(set(a) | set(b)) == 4
    assert pool.acquire(SCALE) is None


def test_fractional_requests_pack_onto_one_id() -> None:
    pool = GpuIdPool.for_count(2 * SCALE)
    ids = [pool.acquire(SCALE // 4) for _ in range(4)]
    assert ids == [(0,)] * 4
    # GPU 1 stayed whole, so a full-GPU request still fits.
    assert pool.acquire(SCALE) == (1,)


def test_a_fraction_goes_to_the_fullest_id_that_still_has_room() -> None:
    pool = GpuIdPool.for_count(2 * SCALE)
    assert pool.acquire(SCALE // 2) == (0,)
    assert pool.acquire(SCALE // 4) == (0,)
    assert pool.acquire(SCALE // 2) == (1,)
    assert pool.acquire(SCALE // 4) == (0,)


def test_whole_requests_skip_ids_that_are_partly_used() -> None:
    pool = GpuIdPool.for_count(2 * SCALE)
    pool.acquire(SCALE // 2)
    assert pool.acquire(2 * SCALE) is None
    assert pool.acquire(SCALE) == (1,)


def test_release_gives_the_capacity_back_and_refuses_a_double_release() -> None:
    pool = GpuIdPool.for_count(SCALE)
    ids = pool.acquire(SCALE // 2)
    assert ids == (0,)
    pool.release(ids, SCALE // 2)
    assert pool.free() == {0: SCALE}
    with pytest.raises(ValueError, match="GPU id 0"):
        pool.release(ids, SCALE // 2)


gpu_requests = st.sampled_from([SCALE // 4, SCALE // 2, SCALE, 2 * SCALE, SCALE // 10, 3 * SCALE // 10])


@settings(max_examples=80, deadline=None)
@given(st.lists(gpu_requests, max_size=20), st.randoms(use_true_random=False))
def test_gpu_ids_never_overcommit_and_all_come_back(requests: list[int], rnd) -> None:
    pool = GpuIdPool.for_count(4 * SCALE)
    held = []
    for amount in requests:
        ids = pool.acquire(amount)
        if ids is None:
            continue
        if amount >= SCALE:
            assert len(set(ids)) == amount // SCALE
        else:
            assert len(ids) == 1
        held.append((ids, amount))
        assert all(0 <= f <= SCALE for f in pool.free().values())
        # Whole-GPU holders never share an id with anyone.
        whole = [i for ids_, a in held if a >= SCALE for i in ids_]
        assert len(whole) == len(set(whole))
        frac = {i for ids_, a in held if a < SCALE for i in ids_}
        assert not frac & set(whole)
    rnd.shuffle(held)
    for ids, amount in held:
        pool.release(ids, amount)
    assert pool.free() == {i: SCALE for i in range(4)}
