"""LocalScheduler on one node and with a gossiped view of others (no placement groups)."""

from __future__ import annotations

import pytest

from zmesh.core.resources import NodeResources
from zmesh.core.scheduler import MAX_HOPS, LocalScheduler
from zmesh.core.scheduling import (
    SPREAD,
    Dispatch,
    Failed,
    Forward,
    Infeasible,
    NodeAffinity,
    Pending,
    Request,
)
from zmesh.errors import ActorUnschedulableError, TaskUnschedulableError


def wid(n: int) -> bytes:
    return n.to_bytes(4, "big")


def task(n: int, **kw) -> Request:
    return Request(wid(n), **kw)


def only(decisions: list) -> object:
    assert len(decisions) == 1, decisions
    return decisions[0]


def dispatched(decisions: list) -> list[bytes]:
    return [d.work_id for d in decisions if isinstance(d, Dispatch)]


# ----------------------------------------------------------------------- one node


def test_a_default_task_runs_locally_holding_one_cpu_until_it_finishes() -> None:
    s = LocalScheduler("a", {"CPU": 2})
    assert only(s.submit(task(1))) == Dispatch(wid(1), s.running()[wid(1)].resources)
    assert s.available() == {"CPU": 1.0}
    assert s.finish(wid(1)) == []
    assert s.available() == {"CPU": 2.0}


def test_work_waits_for_resources_and_starts_in_submission_order() -> None:
    s = LocalScheduler("a", {"CPU": 1})
    s.submit(task(1))
    pending = only(s.submit(task(2)))
    assert isinstance(pending, Pending) and "needs {CPU: 1}" in pending.reason
    assert "needs {CPU: 1}, free {CPU: 0}" in s.pending()[0].reason
    s.submit(task(3))
    assert dispatched(s.finish(wid(1))) == [wid(2)]
    assert dispatched(s.finish(wid(2))) == [wid(3)]
    assert s.pending() == []


def test_a_big_request_does_not_block_smaller_ones_behind_it() -> None:
    s = LocalScheduler("a", {"CPU": 4})
    for n in range(4):
        s.submit(task(n))
    assert isinstance(only(s.submit(task(10, resources={"CPU": 4}))), Pending)
    assert isinstance(only(s.submit(task(11))), Pending)
    # One CPU frees: the big task still cannot start, the small one behind it does.
    assert dispatched(s.finish(wid(0))) == [wid(11)]
    assert [p.work_id for p in s.pending()] == [wid(10)]


def test_older_work_of_another_shape_starts_first_when_both_fit() -> None:
    s = LocalScheduler("a", {"CPU": 2})
    s.submit(task(0, resources={"CPU": 2}))
    s.submit(task(1, resources={"CPU": 2}))
    s.submit(task(2))
    s.submit(task(3))
    assert dispatched(s.finish(wid(0))) == [wid(1)]
    assert dispatched(s.finish(wid(1))) == [wid(2), wid(3)]


def test_ten_tenths_of_a_cpu_fill_it_exactly_and_free_it_exactly() -> None:
    s = LocalScheduler("a", {"CPU": 1})
    for n in range(10):
        assert isinstance(only(s.submit(task(n, resources={"CPU": 0.1}))), Dispatch)
    assert isinstance(only(s.submit(task(10, resources={"CPU": 0.1}))), Pending)
    assert dispatched(s.finish(wid(0))) == [wid(10)]
    for n in range(1, 11):
        s.finish(wid(n))
    assert s.available() == s.total() == {"CPU": 1.0}


def test_an_actor_needs_a_cpu_to_be_placed_but_holds_none_while_alive() -> None:
    s = LocalScheduler("a", {"CPU": 1})
    actor = only(s.submit(Request(wid(1), kind="actor")))
    assert isinstance(actor, Dispatch) and actor.resources.is_empty()
    assert s.available() == {"CPU": 1.0}
    assert isinstance(only(s.submit(task(2))), Dispatch)
    # With no CPU free the next actor cannot be placed.
    assert isinstance(only(s.submit(Request(wid(3), kind="actor"))), Pending)
    assert dispatched(s.finish(wid(2))) == [wid(3)]


def test_an_actor_with_explicit_resources_holds_them() -> None:
    s = LocalScheduler("a", {"CPU": 2, "GPU": 1})
    d = only(s.submit(Request(wid(1), kind="actor", resources={"GPU": 1})))
    assert isinstance(d, Dispatch) and d.gpu_ids == (0,)
    assert s.available() == {"CPU": 2.0}


def test_whole_gpu_tasks_get_distinct_ids_and_fractions_share_one() -> None:
    s = LocalScheduler("a", {"CPU": 8, "GPU": 3})
    two = only(s.submit(task(1, resources={"GPU": 2})))
    half_a = only(s.submit(task(2, resources={"GPU": 0.5})))
    half_b = only(s.submit(task(3, resources={"GPU": 0.5})))
    assert isinstance(two, Dispatch) and len(set(two.gpu_ids)) == 2
    assert isinstance(half_a, Dispatch) and isinstance(half_b, Dispatch)
    assert half_a.gpu_ids == half_b.gpu_ids
    assert not set(half_a.gpu_ids) & set(two.gpu_ids)
    assert isinstance(only(s.submit(task(4, resources={"GPU": 1}))), Pending)
    s.finish(wid(2))
    assert dispatched(s.finish(wid(3))) == [wid(4)]


def test_a_request_no_node_can_ever_hold_is_infeasible_naming_the_resource() -> None:
    s = LocalScheduler("a", {"CPU": 4})
    d = only(s.submit(task(1, resources={"GPU": 1}, name="train")))
    assert isinstance(d, Infeasible)
    assert d.missing == (("GPU", 1.0, 0.0),)
    assert "task 'train'" in d.reason and "GPU need 1, largest node has 0" in d.reason
    [info] = s.pending()
    assert info.infeasible and info.name == "train"


def test_infeasible_work_moves_to_a_node_that_joins_with_the_resource() -> None:
    s = LocalScheduler("a", {"CPU": 4})
    s.submit(task(1, resources={"GPU": 1}))
    assert s.update_cluster({"b": NodeResources.of({"CPU": 1})}) == []
    [fwd] = s.update_cluster({"b": NodeResources.of({"CPU": 1, "GPU": 1})})
    assert isinstance(fwd, Forward) and fwd.node_id == "b" and fwd.request.hops == 1
    assert s.pending() == []


def test_cancel_drops_waiting_work_and_frees_running_work() -> None:
    s = LocalScheduler("a", {"CPU": 1})
    s.submit(task(1))
    s.submit(task(2))
    s.submit(task(3))
    assert s.cancel(wid(2)) == []
    assert dispatched(s.cancel(wid(1))) == [wid(3)]
    assert s.cancel(wid(99)) == []
    s.finish(wid(3))
    assert s.available() == {"CPU": 1.0}


def test_submitting_a_work_id_twice_is_refused() -> None:
    s = LocalScheduler("a", {"CPU": 1})
    s.submit(task(1))
    with pytest.raises(ValueError, match="already submitted"):
        s.submit(task(1))


def test_finishing_unknown_work_is_refused() -> None:
    with pytest.raises(ValueError, match="not running"):
        LocalScheduler("a", {"CPU": 1}).finish(wid(1))


@pytest.mark.parametrize(
    ("request_kw", "match"),
    [
        ({"resources": {"CPU": -1}}, "'CPU'"),
        ({"resources": {"GPU": 1.5}}, "'GPU' amount 1.5"),
        ({"placement_resources": {"CPU": "x"}}, "'CPU'"),
        ({"kind": "job"}, "'job'"),
        ({"labels": {"zone": 1}}, "label 'zone'"),
    ],
)
def test_bad_requests_raise_value_error_naming_what_was_wrong(request_kw, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        LocalScheduler("a", {"CPU": 1}).submit(task(1, **request_kw))


def test_a_bad_amount_equal_to_a_good_one_is_still_refused() -> None:
    s = LocalScheduler("a", {"CPU": 2})
    s.submit(task(1, resources={"CPU": 1}))
    with pytest.raises(ValueError, match="'CPU'"):
        s.submit(task(2, resources={"CPU": True}))


def test_a_node_cannot_be_made_with_a_fraction_of_a_gpu() -> None:
    with pytest.raises(ValueError, match="whole GPUs"):
        LocalScheduler("a", {"GPU": 0.5})


# ------------------------------------------------------------------ many nodes


def cluster_view(**nodes: tuple[dict, dict | None]) -> dict[str, NodeResources]:
    return {n: NodeResources.of(total, avail) for n, (total, avail) in nodes.items()}


def test_work_that_does_not_fit_locally_goes_to_the_node_with_most_argument_bytes() -> None:
    s = LocalScheduler("a", {"CPU": 1})
    s.update_cluster(cluster_view(b=({"CPU": 4}, None), c=({"CPU": 4}, None)))
    s.submit(task(1))
    fwd = only(s.submit(task(2, arg_locality={"b": 10, "c": 5_000_000})))
    assert isinstance(fwd, Forward) and fwd.node_id == "c"


def test_local_node_first_even_when_arguments_live_elsewhere() -> None:
    s = LocalScheduler("a", {"CPU": 1})
    s.update_cluster(cluster_view(b=({"CPU": 4}, None)))
    assert isinstance(only(s.submit(task(1, arg_locality={"b": 10**9}))), Dispatch)


def test_a_burst_is_not_all_forwarded_to_one_node_that_looked_free() -> None:
    s = LocalScheduler("a", {"CPU": 1})
    s.update_cluster(cluster_view(b=({"CPU": 2}, None)))
    decisions = [only(s.submit(task(n))) for n in range(4)]
    assert [type(d).__name__ for d in decisions] == ["Dispatch", "Forward", "Forward", "Pending"]


def test_work_waiting_here_moves_when_gossip_shows_room_elsewhere() -> None:
    s = LocalScheduler("a", {"CPU": 1})
    s.submit(task(1))
    s.submit(task(2))
    s.submit(task(3))
    moved = s.update_cluster(cluster_view(b=({"CPU": 1}, None)))
    assert [(type(d).__name__, d.work_id) for d in moved] == [("Forward", wid(2))]
    assert [p.work_id for p in s.pending()] == [wid(3)]


def test_forwarded_work_runs_where_it_lands_if_it_fits() -> None:
    s = LocalScheduler("b", {"CPU": 1})
    s.update_cluster(cluster_view(c=({"CPU": 8}, None)))
    assert isinstance(only(s.submit(task(1, strategy=SPREAD, hops=1))), Dispatch)


def test_work_stops_chasing_free_nodes_after_max_hops() -> None:
    s = LocalScheduler("b", {"CPU": 1})
    s.submit(task(0))
    s.update_cluster(cluster_view(c=({"CPU": 8}, None)))
    assert isinstance(only(s.submit(task(1, hops=MAX_HOPS - 1))), Forward)
    assert isinstance(only(s.submit(task(2, hops=MAX_HOPS))), Pending)


def test_work_too_big_for_this_node_goes_to_a_node_whose_total_fits() -> None:
    s = LocalScheduler("a", {"CPU": 1})
    s.update_cluster(cluster_view(b=({"CPU": 8}, {"CPU": 0})))
    fwd = only(s.submit(task(1, resources={"CPU": 4})))
    assert isinstance(fwd, Forward) and fwd.node_id == "b"


def test_spread_round_robins_over_nodes_that_fit() -> None:
    s = LocalScheduler("a", {"CPU": 4})
    s.update_cluster(cluster_view(b=({"CPU": 4}, None), c=({"CPU": 4}, None)))
    targets = []
    for n in range(6):
        d = only(s.submit(task(n, strategy=SPREAD)))
        targets.append("a" if isinstance(d, Dispatch) else d.node_id)
    assert sorted(targets) == ["a", "a", "b", "b", "c", "c"]
    assert targets[:3] != targets[1:4]


def test_strategies_may_be_named_as_in_ray() -> None:
    s = LocalScheduler("a", {"CPU": 1})
    s.update_cluster(cluster_view(b=({"CPU": 4}, None)))
    first, second = (only(s.submit(task(n, strategy="SPREAD"))) for n in (1, 2))
    assert {type(first), type(second)} == {Dispatch, Forward}
    assert isinstance(only(s.submit(task(3, strategy="DEFAULT"))), Forward)
    with pytest.raises(ValueError, match="'PACKED'"):
        s.submit(task(4, strategy="PACKED"))


def test_hard_affinity_runs_only_on_that_node() -> None:
    s = LocalScheduler("a", {"CPU": 4})
    s.update_cluster(cluster_view(b=({"CPU": 4}, {"CPU": 0})))
    here = only(s.submit(task(1, strategy=NodeAffinity("a"))))
    there = only(s.submit(task(2, strategy=NodeAffinity("b"))))
    assert isinstance(here, Dispatch)
    assert isinstance(there, Forward) and there.node_id == "b"


def test_hard_affinity_to_a_dead_node_fails_naming_it() -> None:
    s = LocalScheduler("a", {"CPU": 4})
    failed = only(s.submit(task(1, strategy=NodeAffinity("gone"), name="f")))
    assert isinstance(failed, Failed)
    assert isinstance(failed.error, TaskUnschedulableError)
    assert "'gone'" in str(failed.error) and "dead or unknown" in str(failed.error)
    actor = only(s.submit(Request(wid(2), kind="actor", strategy=NodeAffinity("gone"))))
    assert isinstance(actor, Failed) and isinstance(actor.error, ActorUnschedulableError)


def test_hard_affinity_to_a_node_too_small_is_infeasible() -> None:
    s = LocalScheduler("a", {"CPU": 1})
    d = only(s.submit(task(1, resources={"CPU": 2}, strategy=NodeAffinity("a"))))
    assert isinstance(d, Infeasible) and d.missing == (("CPU", 2.0, 1.0),)


def test_hard_affinity_to_a_node_without_the_labels_says_so() -> None:
    s = LocalScheduler("a", {"CPU": 1}, labels={"zone": "eu"})
    d = only(s.submit(task(1, labels={"zone": "us"}, strategy=NodeAffinity("a"))))
    assert isinstance(d, Infeasible) and "labels {'zone': 'us'}" in d.reason


def test_soft_affinity_falls_back_when_the_node_is_dead_or_too_small() -> None:
    s = LocalScheduler("a", {"CPU": 4})
    s.update_cluster(cluster_view(b=({"CPU": 1}, None)))
    assert isinstance(only(s.submit(task(1, strategy=NodeAffinity("gone", soft=True)))), Dispatch)
    small = NodeAffinity("b", soft=True)
    assert isinstance(only(s.submit(task(2, resources={"CPU": 2}, strategy=small))), Dispatch)
    fwd = only(s.submit(task(3, strategy=NodeAffinity("b", soft=True))))
    assert isinstance(fwd, Forward) and fwd.node_id == "b"


def test_labels_must_match_the_node_that_runs_the_work() -> None:
    s = LocalScheduler("a", {"CPU": 4}, labels={"zone": "eu"})
    s.update_cluster({"b": NodeResources.of({"CPU": 4}, labels={"zone": "us"})})
    assert isinstance(only(s.submit(task(1, labels={"zone": "eu"}))), Dispatch)
    fwd = only(s.submit(task(2, labels={"zone": "us"})))
    assert isinstance(fwd, Forward) and fwd.node_id == "b"
    none = only(s.submit(task(3, labels={"zone": "asia"})))
    assert isinstance(none, Infeasible) and "labels" in none.reason


def test_the_snapshot_is_what_other_nodes_see() -> None:
    s = LocalScheduler("a", {"CPU": 2, "GPU": 1}, labels={"gpu": "h100"})
    s.submit(task(1, resources={"GPU": 1}))
    snap = s.snapshot()
    assert snap.to_wire() == {
        "total": {"CPU": 2.0, "GPU": 1.0},
        "available": {"CPU": 2.0},
        "labels": {"gpu": "h100"},
    }
