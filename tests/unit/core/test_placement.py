"""place_bundles: each strategy on one node and on several, feasible vs not now vs never;
BundleTable: atomic reservation on one node."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zmesh.core.bundles import BundleTable
from zmesh.core.gpu_ids import GpuIdPool
from zmesh.core.placement import Assignment, Unplaceable, place_bundles
from zmesh.core.resources import SCALE, NodeResources, ResourceSet


def nodes(**cpus: float) -> dict[str, NodeResources]:
    return {name: NodeResources.of({"CPU": n}) for name, n in cpus.items()}


CPU1 = {"CPU": 1}


def test_pack_puts_everything_on_one_node_when_it_fits() -> None:
    result = place_bundles([CPU1, CPU1, CPU1], "PACK", nodes(a=4, b=4))
    assert result == Assignment(("a", "a", "a"))


def test_pack_spills_to_another_node_when_one_is_not_enough() -> None:
    result = place_bundles([CPU1] * 3, "PACK", nodes(a=2, b=2))
    assert isinstance(result, Assignment)
    assert sorted(result.nodes) == ["a", "a", "b"]


def test_strict_pack_refuses_to_split_and_is_infeasible_beyond_every_total() -> None:
    result = place_bundles([CPU1] * 3, "STRICT_PACK", nodes(a=2, b=2))
    assert isinstance(result, Unplaceable) and result.infeasible
    assert "STRICT_PACK" in result.reason and "CPU need 3, largest node has 2" in result.reason


def test_strict_pack_waits_when_the_node_is_only_busy() -> None:
    view = {"a": NodeResources.of({"CPU": 4}, {"CPU": 1})}
    result = place_bundles([CPU1, CPU1], "STRICT_PACK", view)
    assert isinstance(result, Unplaceable) and not result.infeasible
    assert "has free 1" in result.reason


def test_spread_uses_distinct_nodes_when_it_can() -> None:
    result = place_bundles([CPU1] * 3, "SPREAD", nodes(a=4, b=4, c=4))
    assert isinstance(result, Assignment)
    assert sorted(result.nodes) == ["a", "b", "c"]


def test_spread_shares_nodes_when_there_are_fewer_nodes_than_bundles() -> None:
    result = place_bundles([CPU1] * 4, "SPREAD", nodes(a=4, b=4))
    assert isinstance(result, Assignment)
    assert sorted(result.nodes) == ["a", "a", "b", "b"]


def test_strict_spread_of_two_bundles_on_one_node_is_infeasible_saying_why() -> None:
    result = place_bundles([CPU1, CPU1], "STRICT_SPREAD", nodes(a=8))
    assert isinstance(result, Unplaceable) and result.infeasible
    assert "2 distinct nodes" in result.reason and "has 1" in result.reason


def test_strict_spread_of_three_on_two_nodes_is_infeasible_until_more_join() -> None:
    assert place_bundles([CPU1] * 3, "STRICT_SPREAD", nodes(a=4, b=4)) == Unplaceable(
        "STRICT_SPREAD needs 3 distinct nodes for 3 bundles; the cluster has 2", infeasible=True
    )
    result = place_bundles([CPU1] * 3, "STRICT_SPREAD", nodes(a=4, b=4, c=4))
    assert isinstance(result, Assignment) and len(set(result.nodes)) == 3


def test_strict_spread_matches_big_bundles_to_big_nodes() -> None:
    # Greedy in bundle order would put the small bundle on the big node and fail.
    view = {"big": NodeResources.of({"CPU": 4}), "small": NodeResources.of({"CPU": 1})}
    result = place_bundles([CPU1, {"CPU": 4}], "STRICT_SPREAD", view)
    assert result == Assignment(("small", "big"))


def test_a_bundle_no_node_can_hold_is_named_with_its_resource() -> None:
    result = place_bundles([CPU1, {"GPU": 1}], "PACK", nodes(a=4, b=4))
    assert isinstance(result, Unplaceable) and result.infeasible
    assert result.reason.startswith("bundle 1") and "GPU need 1, largest node has 0" in result.reason


def test_the_preferred_node_wins_ties() -> None:
    assert place_bundles([CPU1], "PACK", nodes(a=4, b=4), prefer="b") == Assignment(("b",))


@pytest.mark.parametrize(
    ("bundles", "strategy", "match"),
    [
        ([], "PACK", "at least one bundle"),
        ([{}], "PACK", "bundle 0.*no resources"),
        ([CPU1, {"CPU": -1}], "PACK", "bundle 1.*'CPU'"),
        ([{"GPU": 1.5}], "PACK", "bundle 0.*whole"),
        ([CPU1], "TIGHT", "'TIGHT' is not one of"),
        ({"CPU": 1}, "PACK", "list of resource dicts"),
    ],
)
def test_bad_bundles_and_strategies_raise_value_error(bundles, strategy: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        place_bundles(bundles, strategy, nodes(a=4))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(1, 4), min_size=1, max_size=6),
    st.sampled_from(["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"]),
    st.lists(st.integers(0, 6), min_size=1, max_size=4),
)
def test_an_assignment_never_exceeds_what_a_node_has_free(bundle_cpus, strategy, node_cpus) -> None:
    view = {f"n{i}": NodeResources.of({"CPU": c}) for i, c in enumerate(node_cpus)}
    result = place_bundles([{"CPU": c} for c in bundle_cpus], strategy, view)
    if isinstance(result, Unplaceable):
        return
    used: dict[str, int] = {}
    for cpus, node in zip(bundle_cpus, result.nodes):
        used[node] = used.get(node, 0) + cpus
    assert all(used[n] <= node_cpus[int(n[1:])] for n in used)
    if strategy == "STRICT_PACK":
        assert len(set(result.nodes)) == 1
    if strategy == "STRICT_SPREAD":
        assert len(set(result.nodes)) == len(bundle_cpus)


# ----------------------------------------------------------------------- BundleTable


def table(cpus: float, gpus: int = 0) -> tuple[BundleTable, dict[str, int], GpuIdPool]:
    free = dict(ResourceSet.from_dict({"CPU": cpus, "GPU": gpus}))
    pool = GpuIdPool.for_count(gpus * SCALE)
    return BundleTable(free, pool), free, pool


def test_a_reservation_that_cannot_fully_fit_reserves_nothing() -> None:
    bundles, free, _ = table(cpus=3)
    shapes = {i: ResourceSet.from_dict(CPU1) for i in range(2)}
    shapes[2] = ResourceSet.from_dict({"CPU": 2})
    assert bundles.reserve("pg", shapes) is not None
    assert free == {"CPU": 3 * SCALE}
    assert not bundles.has("pg")


def test_gpu_fragmentation_rolls_back_ids_already_taken() -> None:
    bundles, free, pool = table(cpus=8, gpus=2)
    pool.acquire(SCALE // 2)  # GPU 0 half used by someone else
    shapes = {0: ResourceSet.from_dict({"GPU": 0.5}), 1: ResourceSet.from_dict({"GPU": 1})}
    free["GPU"] -= SCALE // 2
    reason = bundles.reserve("pg", shapes)
    # 1.5 GPU free in sum, but bundle 0 packs onto GPU 0 and bundle 1 gets GPU 1: fits.
    assert reason is None
    assert bundles.release("pg")
    assert pool.free() == {0: SCALE // 2, 1: SCALE}
    shapes = {0: ResourceSet.from_dict({"GPU": 1}), 1: ResourceSet.from_dict({"GPU": 0.5})}
    assert bundles.reserve("pg", shapes) is None


def test_uncommitted_bundles_cannot_be_used_and_abort_returns_them() -> None:
    bundles, free, _ = table(cpus=2)
    one = ResourceSet.from_dict(CPU1)
    assert bundles.reserve("pg", {0: one}) is None
    assert free == {"CPU": SCALE}
    assert bundles.fit("pg", 0, one, one) is None
    bundles.abort("pg")
    assert free == {"CPU": 2 * SCALE}


def test_committed_bundles_survive_abort_and_are_used() -> None:
    bundles, _, _ = table(cpus=2)
    one = ResourceSet.from_dict(CPU1)
    bundles.reserve("pg", {0: one})
    bundles.commit("pg")
    bundles.abort("pg")
    assert bundles.fit("pg", 0, one, one) is not None
