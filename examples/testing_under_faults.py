"""Test your own zmesh program under faults: kills and partitions, checked by a History.

A parameter-server actor receives numbered updates from a trainer, and a task pipeline
squares numbers; both run under fault plans on the simulated mesh (one process, virtual
time) and on real processes. A deliberately wrong pipeline, which swallows a crashed
worker's error and carries on with 0, is caught: hypothesis finds a plan that breaks it and
shrinks it to the smallest one. Run it as a script, or with pytest:

    python examples/testing_under_faults.py
    python -m pytest examples/testing_under_faults.py
"""

from __future__ import annotations

from hypothesis import HealthCheck, find, given, settings

import zmesh
from zmesh.testing import (
    FaultPlan,
    History,
    KillWorker,
    Partition,
    fault_plans,
    sim_mesh,
)
from zmesh.testing.local_cluster import local_cluster


@zmesh.remote(max_restarts=-1, max_task_retries=-1)
class ParameterServer:
    """Applies updates in the order each trainer sends them; says where each landed."""

    def __init__(self) -> None:
        self.applied = 0

    def update(self, trainer: str, n: int) -> tuple[int, int]:
        self.applied += 1
        return n, self.applied


@zmesh.remote(max_retries=-1)
def square(x: int) -> int:
    return x * x


@zmesh.remote(max_retries=0)
def fragile_square(x: int) -> int:
    return x * x


def parameter_server_program(history: History, updates: int = 20) -> None:
    server = ParameterServer.remote()
    calls = [(history.invoke("call", caller="trainer", expected=n),
              server.update.remote("trainer", n)) for n in range(updates)]
    epoch = 0
    last = 0
    for op, ref in calls:
        try:
            n, position = zmesh.get(ref, timeout=30)
        except zmesh.exceptions.RayError as exc:
            op.fail(exc)
            continue
        if position <= last:  # the server restarted: its count began again
            epoch += 1
        last = position
        op.ok(n, applied=(epoch, position))


def pipeline_program(history: History, fn: object = square, n: int = 20) -> None:
    refs = [(history.invoke("get", caller="pipeline", key=i, expected=i * i),
             fn.remote(i)) for i in range(n)]  # type: ignore[attr-defined]
    for op, ref in refs:
        try:
            op.ok(zmesh.get(ref, timeout=30))
        except zmesh.exceptions.RayError as exc:
            op.fail(exc)


def wrong_pipeline_program(history: History, n: int = 20) -> None:
    """The bug: a crashed worker's error is swallowed and the pipeline goes on with 0."""
    refs = [(history.invoke("get", caller="pipeline", key=i, expected=i * i),
             fragile_square.remote(i)) for i in range(n)]
    for op, ref in refs:
        try:
            value = zmesh.get(ref, timeout=30)
        except zmesh.exceptions.WorkerCrashedError:
            value = 0
        op.ok(value)


def check_on_sim(plan: FaultPlan, program: object) -> list[object]:
    history = History()
    with sim_mesh(nodes=plan.nodes, seed=plan.seed, faults=plan):
        program(history)  # type: ignore[operator]
    return list(history.violations(get_bound=30.0))


PLANS = fault_plans(kill_workers=True, kill_actors=True, partitions=True, max_faults=4,
                    horizon=0.02, max_duration=0.02)
SETTINGS = settings(max_examples=10, deadline=None, database=None,
                    suppress_health_check=list(HealthCheck))


@SETTINGS
@given(plan=PLANS)
def test_parameter_server_applies_each_trainers_updates_in_order(plan: FaultPlan) -> None:
    history = History()
    with sim_mesh(nodes=plan.nodes, seed=plan.seed, faults=plan):
        parameter_server_program(history)
    history.check(per_caller_order=True, get_bound=30.0)


@SETTINGS
@given(plan=PLANS)
def test_pipeline_returns_every_square_or_a_documented_error(plan: FaultPlan) -> None:
    assert check_on_sim(plan, pipeline_program) == []


def test_the_wrong_pipeline_is_caught_and_its_plan_shrunk() -> None:
    shrunk = find_breaking_plan()
    assert len(shrunk.faults) == 1 and isinstance(shrunk.faults[0], KillWorker)


def find_breaking_plan() -> FaultPlan:
    return find(fault_plans(kill_workers=True, partitions=True, max_faults=4, horizon=0.02),
                lambda plan: bool(check_on_sim(plan, wrong_pipeline_program)),
                settings=settings(max_examples=150, deadline=None, database=None, derandomize=True,
                                  suppress_health_check=list(HealthCheck)))


def test_the_same_programs_on_real_processes() -> None:
    plan = FaultPlan(seed=1, nodes=3, faults=(KillWorker(at=0.3),
                                              Partition(at=0.5, side=(2,), duration=1.0)))
    history = History()
    with local_cluster(nodes=3, faults=plan) as mesh:
        pipeline_program(history, n=30)
        parameter_server_program(history)
        mesh.finish()
    history.check(per_caller_order=True, get_bound=30.0)
    assert mesh.leaks() == []


if __name__ == "__main__":
    test_parameter_server_applies_each_trainers_updates_in_order()
    test_pipeline_returns_every_square_or_a_documented_error()
    print("simulated mesh: 10 plans each for the parameter server and the pipeline, no violation")
    shrunk = find_breaking_plan()
    violations = check_on_sim(shrunk, wrong_pipeline_program)
    print(f"the wrong pipeline breaks under this shrunk plan:\n{shrunk}\nfirst violation: "
          f"{violations[0]}")
    test_the_same_programs_on_real_processes()
    print("real processes: a worker kill and a partition, no violation")
