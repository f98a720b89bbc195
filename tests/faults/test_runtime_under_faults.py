"""Hypothesis over the whole runtime: random programs under random fault schedules on the
simulated mesh (see runtime_program.Checker for the invariants). 200 schedules of 50 steps
by default, 1,000 with --slow; counts are printed at the end of the run."""

from __future__ import annotations

import os
from typing import Any

import pytest
import runtime_program
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from runtime_program import NODES, run_schedule

STEPS = 50

_ops = st.one_of(
    st.tuples(st.just("task"), st.integers(0, 100)),
    st.tuples(st.just("chain"), st.integers(0, 100), st.integers(1, 5)),
    st.tuples(st.just("tree"), st.integers(1, 3), st.integers(2, 3)),
    st.tuples(st.just("put"), st.sampled_from([4, 200_000]), st.integers(0, 9)),
    st.tuples(st.just("borrow"), st.integers(0, 9)),
    st.tuples(st.just("inner"), st.integers(0, 100)),
    st.tuples(st.just("relay"), st.integers(0, 9)),
    st.tuples(st.just("actor"), st.sampled_from([0, 1, -1]), st.sampled_from([0, -1])),
    st.tuples(st.just("call"), st.integers(0, 9)),
    st.tuples(st.just("call"), st.integers(0, 9)),
    st.tuples(st.just("pg"), st.integers(0, 100)),
    st.tuples(st.just("unpg"), st.integers(0, 9)),
    st.tuples(st.just("get"), st.integers(0, 99)),
    st.tuples(st.just("forget"), st.integers(0, 99)),
    st.tuples(st.just("advance"), st.sampled_from([0.01, 0.5, 3.0])),
)
_durations = st.sampled_from([0.2, 1.0, 5.0])
_faults = st.one_of(
    st.tuples(st.just("kill_worker")),
    st.tuples(st.just("kill_actor"), st.integers(0, 9)),
    st.tuples(st.just("kill_node"), st.sampled_from(NODES[1:])),
    st.tuples(st.just("kill_owner"), st.integers(0, 9)),
    st.tuples(st.just("pause"), st.sampled_from(NODES), _durations),
    st.tuples(st.just("partition"), st.sampled_from(NODES), _durations),
    st.tuples(st.just("link"), st.sampled_from([0.0, 0.05]), st.sampled_from([0.0, 0.1]),
              st.sampled_from([0.0, 0.3]), st.sampled_from([0.0, 0.1]), _durations),
    st.tuples(st.just("slow"), st.sampled_from(NODES), st.sampled_from([0.05, 0.5]), _durations),
)
_step = st.one_of(_ops, _ops, _ops, _faults)  # about one step in four is a fault


def _examples(config: Any) -> int:
    if os.environ.get("ZMESH_FAULT_SCHEDULES"):
        return int(os.environ["ZMESH_FAULT_SCHEDULES"])
    return 1000 if config.getoption("--slow") else 200


@pytest.fixture(scope="module")
def n_examples(request: pytest.FixtureRequest) -> int:
    return _examples(request.config)


@pytest.mark.timeout(1800)  # 200 schedules: ~1 min of CPU, more wall time on a busy machine
def test_random_programs_under_random_faults_keep_the_invariants(
        n_examples: int, pytestconfig: pytest.Config) -> None:
    failures: list[str] = []
    runtime_program.strict_liveness = not pytestconfig.getoption("--lenient-liveness")

    # no shrinking: a failure prints its seed, steps and story; replay with run_schedule
    @settings(max_examples=n_examples, deadline=None, database=None, derandomize=True,
              phases=(Phase.explicit, Phase.generate),
              suppress_health_check=list(HealthCheck), report_multiple_bugs=False)
    @given(seed=st.integers(0, 2**32 - 1), steps=st.lists(_step, min_size=STEPS, max_size=STEPS))
    def check(seed: int, steps: list[tuple[Any, ...]]) -> None:
        violations, mesh = run_schedule(seed, steps)
        if violations:
            story = mesh.story(80)
            failures.append(f"seed={seed}")
            raise AssertionError(
                f"{len(violations)} violation(s) with seed={seed} "
                f"(replay: run_schedule({seed}, steps) with the steps below)\n"
                + "\n".join(violations) + f"\nstory:\n{story}")

    check()
