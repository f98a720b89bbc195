"""The pytest plugin: seeded fault_plan fixture, replay line on failure, figures at the end."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]


@pytest.fixture(autouse=True)
def _only_this_plugin(monkeypatch):
    # The plugin is loaded by name whether or not this environment has its entry point.
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")


def run(pytester, *args):
    return pytester.runpytest_subprocess("-p", "zmesh.testing.plugin", *args)


def test_a_failing_test_prints_its_plan_seed_and_replay_command(pytester):
    pytester.makepyfile(test_user="""
        import pytest
        from zmesh.testing.plugin import note_plan, record_run

        @pytest.mark.zmesh_faults(kill_workers=True, partitions=True)
        def test_fails(fault_plan):
            record_run("demo", seed=fault_plan.seed, plan=fault_plan, faults=2, ops=5)
            assert False, "the program lost an update"

        def test_passes(fault_plan):
            note_plan(fault_plan, 3)
    """)
    result = run(pytester, "--zmesh-seed=42")
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    assert "FaultPlan(seed=42, nodes=3" in out
    assert "replay: python -m pytest test_user.py::test_fails --zmesh-seed=42" in out
    assert "test_user.py::test_passes: 3 fault(s) injected (passed)" in out
    assert "demo: 1 runs, 2 faults injected, 5 operations checked, 0 violations" in out


def test_the_same_seed_gives_the_same_plan(pytester):
    pytester.makepyfile(test_user="""
        def test_show(fault_plan):
            print("PLAN", fault_plan.to_json())
    """)
    runs = [run(pytester, "--zmesh-seed=7", "-s")
            for _ in range(2)]
    plans = [[ln.split("PLAN", 1)[1] for ln in r.stdout.lines if "PLAN {" in ln] for r in runs]
    assert plans[0] == plans[1] and len(plans[0]) == 1


def test_zmesh_plan_pins_every_fault_plans_strategy(pytester):
    from zmesh.testing import FaultPlan, KillWorker

    plan = FaultPlan(seed=9, faults=(KillWorker(at=1.5),))
    pytester.makepyfile(test_user="""
        from hypothesis import given, settings
        from zmesh.testing import fault_plans

        @settings(max_examples=5, database=None)
        @given(plan=fault_plans(partitions=True))
        def test_pinned(plan):
            assert plan.seed == 9 and len(plan.faults) == 1
    """)
    result = run(pytester, f"--zmesh-plan={plan.to_json()}")
    result.assert_outcomes(passed=1)
