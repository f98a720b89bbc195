"""Placement groups through the LocalScheduler: reservation, bundle-scoped work, removal,
and the prepare/commit exchange when bundles land on several nodes."""

from __future__ import annotations

from scheduler_cluster import SimCluster

from zmesh.core.resources import NodeResources
from zmesh.core.scheduler import LocalScheduler
from zmesh.core.scheduling import (
    BundlesPrepared,
    Dispatch,
    Failed,
    Forward,
    Infeasible,
    LookupPlacementGroup,
    Pending,
    PGAbort,
    PGCommit,
    PGInfeasible,
    PGPending,
    PGPrepare,
    PGReady,
    PGRelease,
    PGRemoved,
    PlacementGroupTarget,
    Request,
)
from zmesh.errors import TaskUnschedulableError


def wid(n: int) -> bytes:
    return n.to_bytes(4, "big")


def in_bundle(n: int, index: int, pg: str = "pg", **kw) -> Request:
    return Request(wid(n), strategy=PlacementGroupTarget(pg, index), **kw)


def only(decisions: list) -> object:
    assert len(decisions) == 1, decisions
    return decisions[0]


CPU1 = {"CPU": 1}


def test_a_group_that_fits_is_ready_at_once_and_takes_its_resources_from_the_node() -> None:
    s = LocalScheduler("a", {"CPU": 4})
    assert s.create_placement_group("pg", [CPU1, CPU1], "PACK") == [PGReady("pg", ("a", "a"))]
    assert s.available() == {"CPU": 2.0}
    [info] = s.placement_groups()
    assert info.state == "ready" and info.nodes == ("a", "a")


def test_work_in_a_bundle_draws_only_on_that_bundle() -> None:
    s = LocalScheduler("a", {"CPU": 4})
    s.create_placement_group("pg", [CPU1, CPU1], "PACK")
    first = only(s.submit(in_bundle(1, 0)))
    assert isinstance(first, Dispatch) and first.bundle == ("pg", 0)
    # Bundle 0 is full; the node still has 2 CPUs and bundle 1 is free, but index 0 waits.
    assert isinstance(only(s.submit(in_bundle(2, 0))), Pending)
    anywhere = only(s.submit(in_bundle(3, -1)))
    assert isinstance(anywhere, Dispatch) and anywhere.bundle == ("pg", 1)
    assert s.available() == {"CPU": 2.0}
    assert [d.work_id for d in s.finish(wid(1))] == [wid(2)]


def test_work_outside_the_group_cannot_use_reserved_resources() -> None:
    s = LocalScheduler("a", {"CPU": 2})
    s.create_placement_group("pg", [CPU1], "PACK")
    assert isinstance(only(s.submit(Request(wid(1)))), Dispatch)
    assert isinstance(only(s.submit(Request(wid(2)))), Pending)


def test_a_group_that_cannot_fully_fit_now_reserves_nothing_and_waits() -> None:
    s = LocalScheduler("a", {"CPU": 3})
    s.submit(Request(wid(1)))
    s.submit(Request(wid(2)))
    pending = only(s.create_placement_group("pg", [CPU1, CPU1], "STRICT_PACK"))
    assert isinstance(pending, PGPending) and "CPU" in pending.reason
    assert s.available() == {"CPU": 1.0}
    # Work submitted after the group does not wait behind it...
    assert isinstance(only(s.submit(Request(wid(3)))), Dispatch)
    assert s.finish(wid(3)) == []  # ...and one free CPU is still not enough: no event.
    assert s.finish(wid(1)) == [PGReady("pg", ("a", "a"))]
    assert s.available() == {}  # Ray leaves exhausted resources out


def test_a_group_bigger_than_the_node_is_infeasible_and_reserves_nothing() -> None:
    s = LocalScheduler("a", {"CPU": 2})
    d = only(s.create_placement_group("pg", [CPU1] * 3, "PACK", name="trainers"))
    assert isinstance(d, PGInfeasible) and "'trainers'" in d.reason
    assert s.available() == {"CPU": 2.0}
    assert s.placement_groups()[0].state == "infeasible"


def test_strict_spread_of_two_bundles_on_one_node_waits_saying_why() -> None:
    s = LocalScheduler("a", {"CPU": 8})
    d = only(s.create_placement_group("pg", [CPU1, CPU1], "STRICT_SPREAD"))
    assert isinstance(d, PGInfeasible)
    assert "STRICT_SPREAD needs 2 distinct nodes" in d.reason
    work = only(s.submit(in_bundle(1, 0)))
    assert isinstance(work, Pending) and "STRICT_SPREAD" in work.reason


def test_work_bigger_than_its_bundle_is_infeasible_naming_the_bundle() -> None:
    s = LocalScheduler("a", {"CPU": 8})
    s.create_placement_group("pg", [CPU1, {"CPU": 2}], "PACK")
    d = only(s.submit(in_bundle(1, 0, resources={"CPU": 2})))
    assert isinstance(d, Infeasible) and "bundle 0 holds {CPU: 1}" in d.reason
    assert d.missing == (("CPU", 2.0, 1.0),)
    fits = only(s.submit(in_bundle(2, -1, resources={"CPU": 2})))
    assert isinstance(fits, Dispatch) and fits.bundle == ("pg", 1)


def test_a_bundle_index_past_the_end_fails() -> None:
    s = LocalScheduler("a", {"CPU": 8})
    s.create_placement_group("pg", [CPU1], "PACK")
    d = only(s.submit(in_bundle(1, 3)))
    assert isinstance(d, Failed) and "bundle_index 3 is out of range" in str(d.error)


def test_gpu_work_in_a_bundle_gets_the_bundles_gpu_ids() -> None:
    s = LocalScheduler("a", {"CPU": 8, "GPU": 2})
    s.submit(Request(wid(0), resources={"GPU": 1}))  # takes GPU 0
    s.create_placement_group("pg", [{"GPU": 1}], "PACK")
    halves = [only(s.submit(in_bundle(n, 0, resources={"GPU": 0.5}))) for n in (1, 2)]
    assert [d.gpu_ids for d in halves] == [(1,), (1,)]
    assert isinstance(only(s.submit(Request(wid(3), resources={"GPU": 1}))), Pending)


def test_removing_a_group_frees_everything_and_names_the_work_to_kill() -> None:
    s = LocalScheduler("a", {"CPU": 4})
    s.create_placement_group("pg", [CPU1, CPU1], "PACK")
    s.submit(in_bundle(1, 0))
    s.submit(in_bundle(2, 0))
    s.submit(Request(wid(3), resources={"CPU": 3}))  # waits for the group's CPUs
    out = s.remove_placement_group("pg")
    assert out[0] == PGRemoved("pg", (wid(1),), coordinated=True)  # made here
    [failed] = [d for d in out if isinstance(d, Failed)]
    assert failed.work_id == wid(2) and isinstance(failed.error, TaskUnschedulableError)
    assert [d.work_id for d in out if isinstance(d, Dispatch)] == [wid(3)]
    assert s.finish(wid(1)) == []  # the runtime's late report for killed work is harmless
    s.finish(wid(3))
    assert s.available() == s.total()
    late = only(s.submit(in_bundle(4, 0)))
    assert isinstance(late, Failed) and "was removed" in str(late.error)


def test_work_for_an_unknown_group_waits_and_asks_where_it_is() -> None:
    s = LocalScheduler("a", {"CPU": 4})
    s.update_cluster({"b": NodeResources.of({"CPU": 4})})
    out = s.submit(in_bundle(1, 1, pg="elsewhere"))
    assert isinstance(out[0], Pending) and out[1] == LookupPlacementGroup("elsewhere")
    [fwd] = s.note_placement_group("elsewhere", ["a", "b"], [CPU1, CPU1])
    assert isinstance(fwd, Forward) and fwd.node_id == "b"


# ------------------------------------------------------------------- many nodes


def test_strict_spread_reserves_on_each_node_only_after_all_prepared() -> None:
    a, b = LocalScheduler("a", {"CPU": 2}), LocalScheduler("b", {"CPU": 2})
    a.update_cluster({"b": b.snapshot()})
    [prepare] = a.create_placement_group("pg", [CPU1, CPU1], "STRICT_SPREAD")
    assert isinstance(prepare, PGPrepare) and prepare.node_id == "b"
    assert a.available() == {"CPU": 1.0}  # a's own bundle is held while b prepares
    assert isinstance(only(a.submit(in_bundle(1, 0))), Pending)  # not usable before commit
    [reply] = b.prepare_bundles(prepare.pg_id, prepare.attempt, prepare.bundles)
    assert reply == BundlesPrepared("pg", "b", prepare.attempt, True)
    out = a.on_bundles_prepared(reply)
    assert out[:2] == [PGCommit("pg", "b", ("a", "b"), (CPU1, CPU1)), PGReady("pg", ("a", "b"))]
    assert [d.work_id for d in out if isinstance(d, Dispatch)] == [wid(1)]
    assert b.commit_bundles("pg", ("a", "b"), (CPU1, CPU1)) == []
    # Bundle 1 lives on b: work for it submitted on a is forwarded, and runs in b's bundle.
    fwd = only(a.submit(in_bundle(2, 1)))
    assert isinstance(fwd, Forward) and fwd.node_id == "b"
    ran = only(b.submit(fwd.request))
    assert isinstance(ran, Dispatch) and ran.bundle == ("pg", 1)


def test_a_refused_prepare_aborts_the_attempt_everywhere_and_the_group_waits() -> None:
    a = LocalScheduler("a", {"CPU": 1})
    b, c = LocalScheduler("b", {"CPU": 1}), LocalScheduler("c", {"CPU": 1})
    a.update_cluster({"b": b.snapshot(), "c": c.snapshot()})
    b.submit(Request(wid(9)))  # b is busy; a's view of it is stale
    prepares = a.create_placement_group("pg", [CPU1] * 3, "STRICT_SPREAD")
    assert sorted(p.node_id for p in prepares) == ["b", "c"]
    by_node = {p.node_id: p for p in prepares}
    c_reply = only(c.prepare_bundles("pg", by_node["c"].attempt, by_node["c"].bundles))
    b_reply = only(b.prepare_bundles("pg", by_node["b"].attempt, by_node["b"].bundles))
    assert not b_reply.ok and "CPU" in b_reply.reason
    assert a.on_bundles_prepared(c_reply) == []
    out = a.on_bundles_prepared(b_reply)
    assert out[0] == PGAbort("pg", "c") and isinstance(out[1], PGPending)
    assert a.available() == {"CPU": 1.0}
    c.abort_bundles("pg")
    assert c.available() == {"CPU": 1.0}


def test_a_late_yes_from_an_abandoned_attempt_is_released() -> None:
    a, b = LocalScheduler("a", {"CPU": 1}), LocalScheduler("b", {"CPU": 1})
    a.update_cluster({"b": b.snapshot()})
    [prepare] = a.create_placement_group("pg", [CPU1, CPU1], "STRICT_SPREAD")
    # b dies from a's point of view before answering; it comes back later.
    out = a.update_cluster({})
    assert any(isinstance(d, PGPending) for d in out)
    late = only(b.prepare_bundles("pg", prepare.attempt, prepare.bundles))
    assert a.on_bundles_prepared(late) == [PGAbort("pg", "b")]


def test_a_prepare_or_its_answer_lost_is_asked_again_and_the_group_becomes_ready() -> None:
    """With 5% of messages dropped (seed 8 of the fault runs), a lost PrepareBundles left the
    group 'preparing' forever and every task in it waiting: nothing asked again."""
    a, b = LocalScheduler("a", {"CPU": 2}), LocalScheduler("b", {"CPU": 2})
    c = LocalScheduler("c", {"CPU": 2})
    a.update_cluster({"b": b.snapshot(), "c": c.snapshot()})
    first = a.create_placement_group("pg", [CPU1, CPU1, CPU1], "STRICT_SPREAD")
    by_node = {p.node_id: p for p in first}
    assert a.groups_preparing()
    c_reply = only(c.prepare_bundles("pg", by_node["c"].attempt, by_node["c"].bundles))
    assert a.on_bundles_prepared(c_reply) == []
    # b's prepare is lost. The first tick only marks the attempt: an answer may be on its way.
    assert a.resend_prepares() == []
    [again] = a.resend_prepares()  # a whole period without b's answer: b only is asked again
    assert again == by_node["b"]
    first_b = only(b.prepare_bundles("pg", again.attempt, again.bundles))  # its answer is lost
    [again] = a.resend_prepares()
    reply = only(b.prepare_bundles("pg", again.attempt, again.bundles))
    assert b.available() == {"CPU": 1.0}  # asked twice, it holds one bundle
    out = a.on_bundles_prepared(reply)
    assert PGReady("pg", ("a", "b", "c")) in out and not a.groups_preparing()
    assert a.on_bundles_prepared(first_b) == []  # a copy of an answer it has: nothing to undo
    assert a.resend_prepares() == []


def test_removing_a_group_spread_over_nodes_releases_every_node() -> None:
    sim = SimCluster({"a": {"CPU": 2}, "b": {"CPU": 2}, "c": {"CPU": 2}})
    sim.create_pg("a", "pg", [CPU1, CPU1, CPU1], "STRICT_SPREAD")
    assert sim.pg_events[-1] == PGReady("pg", ("a", "b", "c"))
    for n, index in enumerate(range(3)):
        sim.submit("a", in_bundle(n, index))
    assert {node for node, _ in sim.running.values()} == {"a", "b", "c"}
    assert all(s.available() == {"CPU": 1.0} for s in sim.nodes.values())
    out = sim.nodes["a"].remove_placement_group("pg")
    assert sorted(d.node_id for d in out if isinstance(d, PGRelease)) == ["b", "c"]
    sim.carry_out("a", out)
    assert sorted(sim.killed) == [wid(0), wid(1), wid(2)]
    assert all(s.available() == s.total() for s in sim.nodes.values())


def test_an_infeasible_strict_spread_becomes_ready_when_a_third_node_joins() -> None:
    sim = SimCluster({"a": {"CPU": 2}, "b": {"CPU": 2}})
    sim.create_pg("a", "pg", [CPU1] * 3, "STRICT_SPREAD")
    assert isinstance(sim.pg_events[-1], PGInfeasible)
    sim.nodes["c"] = LocalScheduler("c", {"CPU": 2})
    sim.gossip()
    assert sim.pg_events[-1] == PGReady("pg", ("a", "b", "c"))
