"""Placement groups as Ray: validation, placement_group_table states and stats, equality,
placement_group_capture_child_tasks."""

from __future__ import annotations

import pytest
from runtime_fixtures import wait_until

from zmesh.util import placement_group_table
from zmesh.util.placement_group import (
    get_current_placement_group,
    placement_group,
    remove_placement_group,
)
from zmesh.util.scheduling_strategies import PlacementGroupSchedulingStrategy


@pytest.mark.parametrize("bundles", [
    [],                       # ray source (_validate_bundles): empty list -> ValueError
    [{}],                     # empty bundle
    [{"CPU": 0}],             # only zeros
    [{"CPU": 1}, {"GPU": 0}],  # one bundle with only zeros
    {"CPU": 1},               # not a list
    [{"CPU": "one"}],         # not a number
    [{1: 1}],                 # not a str key
    ["CPU"],                  # not a dict
])
def test_bad_bundles_raise_value_error(ray, bundles):
    # ray source (util/placement_group.py::_validate_bundles): ValueError for each
    with pytest.raises(ValueError):
        placement_group(bundles)


def test_bad_strategy_raises_value_error(ray):
    # ray source (validate_placement_group): "Invalid placement group strategy"
    with pytest.raises(ValueError, match="strategy"):
        placement_group([{"CPU": 1}], strategy="PACKED")


def test_bundle_index_out_of_range_raises_value_error(ray):
    # ray source (check_placement_group_index): index >= bundle_count or < -1 -> ValueError
    # "placement group bundle index ... is invalid", raised when the task is submitted
    pg = placement_group([{"CPU": 1}], strategy="PACK")
    try:
        assert pg.wait(30)

        @ray.remote(num_cpus=1)
        def f():
            return 1

        for bad in (1, 5, -2):
            with pytest.raises(ValueError, match="bundle index"):
                f.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
                    pg, placement_group_bundle_index=bad)).remote()
        ok = f.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
            pg, placement_group_bundle_index=0)).remote()
        assert ray.get(ok, timeout=30) == 1
    finally:
        remove_placement_group(pg)


def test_placement_group_eq_and_hash_follow_the_id(ray):
    # ray source (PlacementGroup.__eq__/__hash__ compare and hash the id); a handle that
    # went through a task compares equal to the original
    pg = placement_group([{"CPU": 1}])
    try:
        @ray.remote(num_cpus=0)
        def echo(p):
            return p

        back = ray.get(echo.remote(pg), timeout=30)
        assert back == pg and hash(back) == hash(pg)
        assert len({pg, back}) == 1
        other = placement_group([{"CPU": 1}])
        assert other != pg
        remove_placement_group(other)
    finally:
        remove_placement_group(pg)


def test_table_states_created_pending_removed_with_stats(ray):
    # docs (placement_group_table; PG states in the observability docs): CREATED once
    # reserved, PENDING while it cannot be, REMOVED after remove_placement_group (removed
    # groups stay listed); ray source: each row carries "stats" with "scheduling_state".
    pg = placement_group([{"CPU": 1}], strategy="STRICT_PACK")
    assert pg.wait(30)
    row = placement_group_table(pg)
    assert row["state"] == "CREATED" and row["strategy"] == "STRICT_PACK"
    assert row["bundles"] == {0: {"CPU": 1.0}}
    assert row["stats"]["scheduling_state"] == "FINISHED"
    assert row["stats"]["scheduling_attempt"] >= 1

    too_big = placement_group([{"CPU": 64}])
    assert wait_until(lambda: placement_group_table(too_big).get("state") == "PENDING",
                      timeout=30)
    assert placement_group_table(too_big)["stats"]["scheduling_state"] == "QUEUED"

    remove_placement_group(pg)
    remove_placement_group(too_big)
    assert wait_until(lambda: placement_group_table(pg).get("state") == "REMOVED", timeout=30)
    assert wait_until(lambda: placement_group_table(too_big).get("state") == "REMOVED",
                      timeout=30)
    table = placement_group_table()
    assert table[pg.id.hex()]["state"] == "REMOVED"


def test_capture_child_tasks(ray):
    # docs (placement groups, "Schedule child tasks and actors to placement groups"): with
    # placement_group_capture_child_tasks=True, tasks the task submits run in its group by
    # default; without it they do not. get_current_placement_group() names the group.
    pg = placement_group([{"CPU": 0.5}, {"CPU": 0.5}])  # leaves 1 of the 2 CPUs outside
    try:
        assert pg.wait(30)

        @ray.remote(num_cpus=0.5)
        def child():
            cur = get_current_placement_group()
            return None if cur is None else cur.id

        @ray.remote(num_cpus=0.5)
        def parent():
            cur = get_current_placement_group()
            return (None if cur is None else cur.id), ray.get(child.remote())

        captured = parent.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
            pg, placement_group_capture_child_tasks=True)).remote()
        mine, childs = ray.get(captured, timeout=60)
        assert mine == pg.id and childs == pg.id

        plain = parent.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
            pg)).remote()
        mine, childs = ray.get(plain, timeout=60)
        assert mine == pg.id and childs is None
        assert get_current_placement_group() is None  # the driver is in no group
    finally:
        remove_placement_group(pg)
