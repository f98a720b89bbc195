"""The pytest plugin as a user meets it: a small test file of theirs, run by pytest with the
plugin loaded from its entry point, using the `fault_plan`, `zmesh_sim` and `zmesh_cluster`
fixtures; the per-test report line, and the replay command of a failing test."""

from __future__ import annotations

import re

import pytest

pytest_plugins = ["pytester"]

USER_TESTS = '''
import pytest
import zmesh


@zmesh.remote(max_retries=-1)
def add_one(x):
    return x + 1


@pytest.mark.zmesh_faults(kill_workers=True, max_faults=3, horizon=2.0)
def test_tasks_survive_worker_kills(zmesh_sim, fault_plan):
    assert zmesh_sim.faults_injected == 0
    first = zmesh.get([add_one.remote(i) for i in range(4)], timeout=60)
    zmesh_sim.advance(3.0)  # virtual seconds: every fault of the plan fires
    assert zmesh_sim.faults_injected > 0
    assert first + zmesh.get([add_one.remote(i) for i in range(4)], timeout=60) == \\
        [1, 2, 3, 4] * 2


@pytest.mark.zmesh_faults(kill_workers=True, max_faults=2, horizon=1.0)
def test_a_deliberately_failing_program(zmesh_sim, fault_plan):
    zmesh_sim.advance(2.0)
    assert zmesh.get(add_one.remote(1), timeout=60) == 3, "deliberately wrong"


def test_the_seed_comes_from_the_command_line(fault_plan):
    assert fault_plan.seed == 424242
'''

CLUSTER_TEST = '''
import pytest
import zmesh


@zmesh.remote(max_retries=-1)
def square(x):
    return x * x


@pytest.mark.zmesh_faults(nodes=2, kill_workers=True, max_faults=1, horizon=0.5)
def test_on_real_processes(zmesh_cluster, fault_plan):
    assert zmesh.get([square.remote(i) for i in range(6)], timeout=60) == \\
        [i * i for i in range(6)]
'''


def test_sim_fixtures_report_faults_per_test_and_a_replay_command(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user_program=USER_TESTS)
    # in a subprocess: the plugin's per-test state must not mix with this test's own
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--zmesh-seed=424242",
                                           timeout=300)
    result.assert_outcomes(passed=2, failed=1)
    out = result.stdout.str()
    assert "zmesh faults per test" in out
    line = re.search(r"test_tasks_survive_worker_kills: (\d+) fault\(s\) injected \(passed\)",
                     out)
    assert line is not None and int(line.group(1)) > 0, out
    assert re.search(r"test_a_deliberately_failing_program: \d+ fault\(s\) injected "
                     r"\(failed\)", out), out
    # the failing test's section: its plan, its seed and the one-line replay command
    assert "seed: 424242" in out
    replay = re.search(r"replay: python -m pytest (\S+) (--zmesh-seed=\d+)", out)
    assert replay is not None, out
    assert replay.group(1).endswith("test_user_program.py::test_a_deliberately_failing_program")
    assert replay.group(2) == "--zmesh-seed=424242"
    # the replay command runs the same plan and fails the same way
    again = pytester.runpytest_subprocess("-p", "no:cacheprovider", replay.group(1),
                                          replay.group(2), timeout=300)
    again.assert_outcomes(failed=1)
    assert "deliberately wrong" in again.stdout.str()


def test_the_cluster_fixture_runs_real_processes_and_checks_for_leaks(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_cluster_program=CLUSTER_TEST)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--zmesh-seed=7",
                                           timeout=300)
    result.assert_outcomes(passed=1)
    assert re.search(r"test_on_real_processes: \d+ fault\(s\) injected \(passed\)",
                     result.stdout.str()), result.stdout.str()
