"""A ready placement group whose node dies is RESCHEDULING: only its lost bundles are placed
again on live nodes, under the group's strategy, then it is ready again and work follows.
Written from Ray's GCS placement group manager (OnNodeDead: the bundles on the dead node are
unplaced, the group goes RESCHEDULING and is scheduled again ahead of new groups)."""

from __future__ import annotations

from scheduler_cluster import SimCluster

from zmesh.core.bundles import BundleTable
from zmesh.core.gpu_ids import GpuIdPool
from zmesh.core.placement import Assignment, Unplaceable, place_lost_bundles
from zmesh.core.resources import NodeResources, ResourceSet
from zmesh.core.scheduler import LocalScheduler
from zmesh.core.scheduling import (
    Dispatch,
    PGReady,
    PGRescheduling,
    PlacementGroupTarget,
    Request,
)

CPU1 = {"CPU": 1}


def wid(n: int) -> bytes:
    return n.to_bytes(4, "big")


def in_bundle(n: int, index: int, pg: str = "pg") -> Request:
    return Request(wid(n), strategy=PlacementGroupTarget(pg, index))


def view(**cpus: float) -> dict[str, NodeResources]:
    return {n: NodeResources(ResourceSet.from_dict({"CPU": c}), ResourceSet.from_dict({"CPU": c}))
            for n, c in cpus.items()}


def states(sim: SimCluster) -> dict[str, str]:
    return {i.pg_id: i.state for s in sim.nodes.values() for i in s.placement_groups()}


# ------------------------------------------------------------- placing lost bundles


def test_strict_spread_places_lost_bundles_away_from_the_nodes_still_used() -> None:
    got = place_lost_bundles([CPU1] * 3, "STRICT_SPREAD", {0: "a", 1: "b"},
                             view(a=4, b=4, d=1))
    assert got == Assignment(("a", "b", "d"))


def test_strict_spread_without_a_spare_node_is_unplaceable() -> None:
    got = place_lost_bundles([CPU1] * 3, "STRICT_SPREAD", {0: "a", 1: "b"}, view(a=4, b=4))
    assert isinstance(got, Unplaceable) and got.infeasible


def test_strict_pack_stays_on_the_node_of_its_surviving_bundles() -> None:
    assert place_lost_bundles([CPU1] * 2, "STRICT_PACK", {0: "b"}, view(a=4, b=4),
                              prefer="a") == Assignment(("b", "b"))
    full = place_lost_bundles([CPU1] * 2, "STRICT_PACK", {0: "b"}, view(a=4))
    assert isinstance(full, Unplaceable)


def test_pack_prefers_the_nodes_the_group_already_uses() -> None:
    got = place_lost_bundles([CPU1] * 3, "PACK", {0: "c"}, view(a=4, c=4), prefer="a")
    assert got == Assignment(("c", "c", "c"))


def test_spread_prefers_nodes_the_group_does_not_use() -> None:
    got = place_lost_bundles([CPU1] * 2, "SPREAD", {0: "a"}, view(a=4, b=4), prefer="a")
    assert got == Assignment(("a", "b"))


def test_a_bundle_table_adds_bundles_next_to_committed_ones_and_aborts_only_new_ones() -> None:
    free = {"CPU": 4 * 10_000}
    table = BundleTable(free, GpuIdPool.for_count(0))
    assert table.reserve("pg", {0: ResourceSet.from_dict(CPU1)}) is None
    table.commit("pg")
    assert table.reserve("pg", {2: ResourceSet.from_dict(CPU1)}) is None
    assert sorted(b.index for b in table.bundles("pg")) == [0, 2]
    table.abort("pg")
    assert [b.index for b in table.bundles("pg")] == [0]
    assert free["CPU"] == 3 * 10_000


def test_a_node_taken_for_dead_holds_a_bundle_placed_on_it_again_and_gives_back_stale_ones(
) -> None:
    # Seeds 105553 and 197: the coordinator took node b for dead and placed b's committed
    # bundle again. Placed on b again, b raised ValueError and never answered; placed on c,
    # b kept the bundle's CPU forever (nobody releases it there). b now says it holds the
    # bundle already, and gives back bundles that the group's layout places elsewhere,
    # evicting the work running in them.
    b = LocalScheduler("b", {"CPU": 2})
    shapes = {0: CPU1, 1: CPU1}
    assert b.prepare_bundles("pg", 1, shapes)[0].ok
    b.commit_bundles("pg", ("b", "b"), (CPU1, CPU1))
    [ran] = b.submit(in_bundle(1, 1))
    assert isinstance(ran, Dispatch) and ran.bundle == ("pg", 1)
    assert b.prepare_bundles("pg", 2, {0: CPU1})[0].ok  # held already: no second CPU
    assert b.available().get("CPU", 0.0) == 0.0
    affected, _ = b.drop_stale_bundles("pg", ("b", "b"))  # the layout keeps both here
    assert affected == () and b.available().get("CPU", 0.0) == 0.0
    affected, _ = b.drop_stale_bundles("pg", ("b", "c"))  # bundle 1 went to c
    assert affected == (wid(1),) and b.available() == {"CPU": 1.0}
    assert [bd.index for bd in b._bundles.bundles("pg")] == [0]
    assert b.finish(wid(1)) == []  # the evicted work ends later: nothing freed twice
    assert b.available() == {"CPU": 1.0}
    b.validate()


def test_a_node_declared_dead_forgets_the_bundles_it_holds_without_taking_the_group_for_removed(
) -> None:
    # The mesh declared node b dead: the coordinator took b's bundles for lost and places
    # them again. b gives every one of them back (committed or only prepared), evicts the
    # work in them, forgets the layout, and accepts the group's bundles again when the
    # coordinator places them on b once more (a removed group would refuse its work).
    b = LocalScheduler("b", {"CPU": 2})
    assert b.prepare_bundles("pg", 1, {0: CPU1, 1: CPU1})[0].ok
    b.commit_bundles("pg", ("b", "b"), (CPU1, CPU1))
    [ran] = b.submit(in_bundle(1, 1))
    assert isinstance(ran, Dispatch)
    affected, _ = b.forget_bundles("pg")
    assert affected == (wid(1),) and b.available() == {"CPU": 2.0}
    assert not b.holds_bundles("pg")
    assert b.finish(wid(1)) == []  # the evicted work ends later: nothing freed twice
    b.validate()
    assert b.prepare_bundles("pg", 2, {1: CPU1})[0].ok
    b.commit_bundles("pg", ("a", "b"), (CPU1, CPU1))
    [again] = b.submit(in_bundle(2, 1))
    assert isinstance(again, Dispatch) and again.bundle == ("pg", 1)
    assert b.available() == {"CPU": 1.0}
    b.validate()


def test_a_group_given_up_for_a_coordinator_taken_for_dead_runs_work_once_placed_again(
) -> None:
    # b took the group's coordinator for dead and removed its part; the coordinator lived
    # (a healed partition) and placed the bundle on b again: its work runs, not failed.
    b = LocalScheduler("b", {"CPU": 2})
    assert b.prepare_bundles("pg", 1, {1: CPU1})[0].ok
    b.commit_bundles("pg", ("a", "b"), (CPU1, CPU1))
    b.remove_placement_group("pg")
    [failed] = b.submit(in_bundle(1, 1))
    assert not isinstance(failed, Dispatch)
    b.placed_again("pg")
    assert b.prepare_bundles("pg", 2, {1: CPU1})[0].ok
    b.commit_bundles("pg", ("a", "b"), (CPU1, CPU1))
    [ran] = b.submit(in_bundle(2, 1))
    assert isinstance(ran, Dispatch) and ran.bundle == ("pg", 1)
    b.validate()


# ------------------------------------------------------------ through the schedulers


def test_a_node_dying_makes_the_group_rescheduling_then_ready_on_a_live_node() -> None:
    sim = SimCluster({"a": {"CPU": 2}, "b": {"CPU": 2}, "c": {"CPU": 2}, "d": {"CPU": 2}})
    sim.create_pg("a", "pg", [CPU1] * 3, "STRICT_SPREAD")
    assert sim.pg_events[-1] == PGReady("pg", ("a", "b", "c"))
    sim.submit("a", in_bundle(1, 1))
    assert sim.running[wid(1)][0] == "b"
    sim.pg_events.clear()
    sim.kill("b")
    kinds = [type(e) for e in sim.pg_events]
    assert kinds == [PGRescheduling, PGReady], sim.pg_events
    assert sim.pg_events[0] == PGRescheduling("pg", (1,), sim.pg_events[0].reason)
    assert sim.pg_events[1] == PGReady("pg", ("a", "d", "c"), rescheduled=True)
    # the actor that was in bundle 1 is restarted there: it lands on d, in the new bundle
    sim.submit("a", in_bundle(2, 1))
    node, d = sim.running[wid(2)]
    assert node == "d" and isinstance(d, Dispatch) and d.bundle == ("pg", 1)
    # c kept its bundle and learned the new layout: work for bundle 1 submitted there goes to d
    sim.finish(wid(2))
    sim.submit("c", in_bundle(3, 1))
    assert sim.running[wid(3)][0] == "d"
    for s in sim.nodes.values():
        s.validate()


def test_a_group_stays_rescheduling_until_a_node_with_room_joins() -> None:
    sim = SimCluster({"a": {"CPU": 1}, "b": {"CPU": 1}})
    sim.create_pg("a", "pg", [CPU1] * 2, "STRICT_SPREAD")
    sim.submit("a", in_bundle(1, 1))
    sim.kill("b")
    assert states(sim) == {"pg": "rescheduling"}
    assert isinstance(sim.pg_events[-1], PGRescheduling)
    sim.submit("a", in_bundle(2, 1))  # waits for the group, not failed
    assert wid(2) not in sim.running and wid(2) not in sim.failed
    sim.nodes["e"] = LocalScheduler("e", {"CPU": 1})
    sim.gossip()
    assert states(sim) == {"pg": "ready"}
    assert sim.pg_events[-1] == PGReady("pg", ("a", "e"), rescheduled=True)
    assert sim.running[wid(2)][0] == "e"


def test_a_group_on_the_coordinator_alone_is_untouched_by_another_node_dying() -> None:
    sim = SimCluster({"a": {"CPU": 2}, "b": {"CPU": 2}})
    sim.create_pg("a", "pg", [CPU1] * 2, "STRICT_PACK")
    assert sim.pg_events[-1] == PGReady("pg", ("a", "a"))
    sim.pg_events.clear()
    sim.kill("b")
    assert sim.pg_events == [] and states(sim) == {"pg": "ready"}


def test_removing_a_rescheduling_group_frees_the_surviving_bundles() -> None:
    sim = SimCluster({"a": {"CPU": 1}, "b": {"CPU": 1}, "c": {"CPU": 1}})
    sim.create_pg("a", "pg", [CPU1] * 3, "STRICT_SPREAD")
    sim.kill("c")
    assert states(sim) == {"pg": "rescheduling"}
    sim.remove_pg("a", "pg")
    assert all(s.available() == s.total() for s in sim.nodes.values())
