"""Placement groups on one node: the four strategies, `ready()`, placing tasks and actors by
bundle index, and removal (frees the reservation and kills the actors in the group)."""

from __future__ import annotations

import os

import pytest
from runtime_fixtures import wait_until

import zmesh
from zmesh.util import placement_group, placement_group_table, remove_placement_group
from zmesh.util.scheduling_strategies import PlacementGroupSchedulingStrategy


def cpus_free(ray) -> float:
    return float(ray.available_resources().get("CPU", 0.0))


@pytest.mark.parametrize("strategy", ["PACK", "SPREAD", "STRICT_PACK"])
def test_two_bundles_fit_one_node_with_strategy(ray, strategy):
    pg = placement_group([{"CPU": 0.5}, {"CPU": 0.5}], strategy=strategy)
    assert ray.get(pg.ready(), timeout=10) is True
    assert pg.wait(timeout_seconds=1)
    table = placement_group_table(pg)
    assert table["state"] == "CREATED" and table["strategy"] == strategy
    assert table["bundles"] == {0: {"CPU": 0.5}, 1: {"CPU": 0.5}}
    assert wait_until(lambda: cpus_free(ray) == 1.0)
    remove_placement_group(pg)
    assert wait_until(lambda: cpus_free(ray) == 2.0)


def test_strict_spread_of_one_bundle_is_placed(ray):
    pg = placement_group([{"CPU": 1}], strategy="STRICT_SPREAD")
    assert ray.get(pg.ready(), timeout=10) is True
    remove_placement_group(pg)


def test_strict_spread_of_two_bundles_stays_pending_on_one_node_and_says_why(ray):
    pg = placement_group([{"CPU": 0.5}, {"CPU": 0.5}], strategy="STRICT_SPREAD")
    ready, not_ready = ray.wait([pg.ready()], timeout=0.3)
    assert ready == [] and not_ready == [pg.ready()]
    assert not pg.wait(timeout_seconds=0.1)
    assert wait_until(lambda: placement_group_table(pg)["state"] == "PENDING")
    reason = placement_group_table(pg)["reason"]
    assert "STRICT_SPREAD" in reason and "2 distinct nodes" in reason
    assert cpus_free(ray) == 2.0  # nothing half-reserved
    remove_placement_group(pg)


def test_a_group_larger_than_the_node_waits_until_room_is_freed(ray):
    first = placement_group([{"CPU": 2}])
    ray.get(first.ready(), timeout=10)
    second = placement_group([{"CPU": 1}])
    assert ray.wait([second.ready()], timeout=0.2)[0] == []
    remove_placement_group(first)
    assert ray.get(second.ready(), timeout=10) is True
    remove_placement_group(second)


def test_tasks_run_in_the_bundle_they_name(ray):
    pg = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="PACK")
    ray.get(pg.ready(), timeout=10)

    @ray.remote(num_cpus=1)
    def where():
        return os.getpid()

    refs = [where.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
        placement_group=pg, placement_group_bundle_index=i)).remote() for i in (0, 1, -1)]
    assert all(isinstance(pid, int) for pid in ray.get(refs, timeout=10))
    assert cpus_free(ray) == 0.0  # the group holds both CPUs, its tasks use them
    remove_placement_group(pg)
    assert wait_until(lambda: cpus_free(ray) == 2.0)


def test_a_task_bigger_than_its_bundle_is_refused_or_waits_saying_why(ray):
    pg = placement_group([{"CPU": 0.5}])
    ray.get(pg.ready(), timeout=10)

    @ray.remote(num_cpus=1)
    def too_big():
        return 1

    ref = too_big.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
        placement_group=pg, placement_group_bundle_index=0)).remote()
    with pytest.raises((zmesh.exceptions.GetTimeoutError, zmesh.exceptions.RayError),
                       match="CPU"):
        ray.get(ref, timeout=0.5)
    remove_placement_group(pg)


def test_a_bundle_index_out_of_range_is_an_error(ray):
    pg = placement_group([{"CPU": 0.5}])
    ray.get(pg.ready(), timeout=10)

    @ray.remote(num_cpus=0.5)
    def f():
        return 1

    with pytest.raises(Exception, match="bundle"):
        ray.get(f.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
            placement_group=pg, placement_group_bundle_index=3)).remote(), timeout=5)
    remove_placement_group(pg)


def test_removing_a_group_kills_its_actors_and_frees_their_resources(ray):
    pg = placement_group([{"CPU": 1}], strategy="STRICT_PACK")
    ray.get(pg.ready(), timeout=10)

    @ray.remote(num_cpus=1)
    class Member:
        def ping(self):
            return "pong"

    member = Member.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
        placement_group=pg, placement_group_bundle_index=0)).remote()
    assert ray.get(member.ping.remote(), timeout=10) == "pong"
    assert cpus_free(ray) == 1.0
    remove_placement_group(pg)

    def member_is_dead():  # removal is asynchronous (as in Ray): a call may still get in first
        try:
            ray.get(member.ping.remote(), timeout=10)
        except zmesh.exceptions.RayActorError:
            return True
        return False

    assert wait_until(member_is_dead)
    assert wait_until(lambda: cpus_free(ray) == 2.0)
    assert wait_until(lambda: placement_group_table(pg).get("state") in (None, "REMOVED"))


def test_bad_placement_groups_are_refused_with_clear_errors(ray):
    with pytest.raises(ValueError, match="strategy"):
        placement_group([{"CPU": 1}], strategy="CLOSE")
    with pytest.raises(ValueError, match="non-empty"):
        placement_group([])
    with pytest.raises(ValueError, match="empty dict"):
        placement_group([{}])


def test_a_group_no_node_can_hold_warns_and_get_on_ready_says_why(ray, capfd):
    pg = placement_group([{"CPU": 64}])
    with pytest.raises(zmesh.exceptions.GetTimeoutError):
        ray.get(pg.ready(), timeout=0.5)
    assert wait_until(lambda: "CPU" in placement_group_table(pg)["reason"])
    # the node sends its warning before it answers the table query above, on the same link
    err = capfd.readouterr().err
    assert "zmesh warning" in err and "cannot be placed" in err and "CPU" in err
    remove_placement_group(pg)
