"""Fault plans: validation, readable printing, exact JSON round trips, target limits."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from zmesh.testing.faults import (
    FaultPlan,
    FaultPlanError,
    KillNode,
    KillOwner,
    KillWorker,
    LinkFault,
    Partition,
    Pause,
    SlowNode,
)
from zmesh.testing.strategies import fault_plans


def test_faults_are_kept_in_time_order_and_print_one_line_each():
    plan = FaultPlan(seed=3, nodes=3, faults=(Partition(at=4, side=(2,), duration=1.5),
                                              KillWorker(at=2.0)))
    assert [type(f) for f in plan.faults] == [KillWorker, Partition]
    text = str(plan)
    assert text.splitlines() == [
        "FaultPlan(seed=3, nodes=3, 2 faults)",
        "       t=2s  kill a worker on any node (SIGKILL)",
        "       t=4s  partition nodes [2] from the rest for 1.5s",
    ]


def test_a_plan_survives_json_exactly():
    plan = FaultPlan(seed=11, nodes=4, faults=(
        KillNode(at=1, node=3), Pause(at=0.5, node=1, duration=2),
        LinkFault(at=0, kind="reorder", rate=0.1, duration=5, between=(0, 2),
                  messages=("PushTask",)),
        SlowNode(at=3, node=2, duration=1, delay=0.3)), unit="s")
    again = FaultPlan.from_json(plan.to_json())
    assert again == plan
    assert str(again) == str(plan)


def test_malformed_plans_name_each_problem():
    with pytest.raises(FaultPlanError) as err:
        FaultPlan(seed=1, nodes=2, faults=(KillNode(at=-1, node=5),
                                           Partition(at=0, side=(0, 1), duration=1)))
    msg = str(err.value)
    assert "before the run" in msg and "names node 5" in msg and "both sides" in msg
    with pytest.raises(FaultPlanError, match="not a fault plan"):
        FaultPlan.from_json('{"seed": 1, "faults": [{"fault": "meteor", "at": 1}]}')


def test_validation_says_which_faults_a_target_cannot_express():
    # both targets now kill owners (local: a driver registered with add_owner, or a worker)
    owners = FaultPlan(seed=1, faults=(KillWorker(at=0), KillOwner(at=1, name="trainer")))
    assert owners.validate("sim") == [] and owners.validate("local") == []
    plan = FaultPlan(seed=1, faults=(KillWorker(at=0), KillNode(at=1, node=0)))
    for target in ("sim", "local"):
        problems = plan.validate(target)
        assert len(problems) == 1 and "fault 1" in problems[0] and "node 0" in problems[0]
    with pytest.raises(FaultPlanError, match="cannot run on the local target"):
        plan.check("local")
    with pytest.raises(FaultPlanError, match="unknown fault target"):
        plan.validate("kubernetes")


def test_events_end_lasting_faults_and_undo_before_the_next_start():
    plan = FaultPlan(seed=1, faults=(Pause(at=1, node=1, duration=1), KillWorker(at=2)))
    assert [(e.at, e.action, type(e.fault).__name__) for e in plan.events()] == [
        (1, "start", "Pause"), (2, "end", "Pause"), (2, "start", "KillWorker")]


def test_run_time_choices_replay_from_the_seed():
    plan = FaultPlan(seed=5)
    assert plan.rng(0).random() == plan.rng(0).random() != plan.rng(1).random()


@settings(max_examples=200, deadline=None)
@given(fault_plans(kill_workers=True, kill_actors=True, kill_nodes=True, pauses=True,
                   partitions=True, drop=0.05, duplicate=0.05, reorder=0.1, delay=0.2,
                   slow_nodes=True))
def test_generated_plans_are_valid_for_the_local_target_and_round_trip(plan):
    assert plan.validate("local") == []
    assert FaultPlan.from_json(plan.to_json()) == plan
    assert all(f.at <= 10.0 for f in plan.faults)


def test_failing_plans_shrink_to_one_early_fault():
    from hypothesis import find

    plan = find(fault_plans(kill_workers=True, partitions=True, drop=0.05),
                lambda p: any(isinstance(f, Partition) for f in p.faults))
    assert len(plan.faults) == 1
    (f,) = plan.faults
    assert f.at == 0 and f.side == (0,) and f.duration == pytest.approx(0.1)


def test_step_plans_count_steps():
    from hypothesis import find

    plan = find(fault_plans(kill_workers=True, steps=50), lambda p: len(p.faults) >= 2)
    assert plan.unit == "step" and [f.at for f in plan.faults] == [0.0, 0.0]
    assert "step 0" in str(plan)
