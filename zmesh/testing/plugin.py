"""The zmesh pytest plugin (entry point `pytest11`): fault-injection fixtures and reports.

Fixtures:
- `fault_plan`: a FaultPlan for this test, seeded from `--zmesh-seed` or a fresh seed;
  shape it with `@pytest.mark.zmesh_faults(kill_workers=True, partitions=True, ...)`
  (the arguments of `FaultPlan.random`).
- `zmesh_cluster`: a `LocalCluster` of real processes running `fault_plan`, with a driver
  connected; fails the test if a process, file or fd is left behind.
- `zmesh_sim`: the simulated mesh (`zmesh.testing.sim_mesh`) running `fault_plan`.

Options: `--zmesh-seed N` replays the plan of seed N; `--zmesh-plan JSON` makes every
`fault_plans()` strategy draw exactly that plan (replays a shrunk hypothesis example).
Each test that ran faults gets a report line; a failing one gets its plan, seed and a
one-line replay command. `record_run()` adds figures to the end-of-run summary.
"""

from __future__ import annotations

import random
import shlex
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from zmesh.testing.faults import FaultPlan

__all__ = ["RunRecord", "record_run", "note_plan"]


@dataclass
class RunRecord:
    """One faulty run, for the end-of-run figures."""

    suite: str
    test: str
    seed: int
    faults: int
    ops: int
    violations: int
    hung: int


_RUNS: list[RunRecord] = []
_CURRENT: dict[str, Any] = {"test": "", "plan": None, "faults": 0, "mesh": None}


def record_run(suite: str, *, seed: int, plan: FaultPlan | None = None, faults: int,
               ops: int = 0, violations: int = 0, hung: int = 0) -> None:
    """Count one run in the summary printed at the end of the test session."""
    _RUNS.append(RunRecord(suite, str(_CURRENT["test"]), seed, faults, ops, violations, hung))
    if plan is not None and plan is not _CURRENT["plan"]:
        note_plan(plan, faults)  # (a LocalCluster running `plan` already counted its faults)


def note_plan(plan: FaultPlan, faults: int = 0) -> None:
    """Remember the plan the current test ran last (printed with a replay line if it fails)."""
    _CURRENT["plan"] = plan
    _CURRENT["faults"] = int(_CURRENT["faults"]) + faults


def note_mesh(mesh: Any) -> None:
    """A target is running the current test's plan: its live fault count goes in the report."""
    _CURRENT["mesh"] = mesh


def _injected(mesh: Any) -> int:
    """Faults a target injected: a method on LocalCluster, a counter on SimMesh."""
    count = getattr(mesh, "faults_injected", 0)
    return int(count() if callable(count) else count)


def _faults_now() -> int:
    mesh = _CURRENT["mesh"]
    live = _injected(mesh) if mesh is not None else 0
    return int(_CURRENT["faults"]) + live


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("zmesh", "zmesh fault injection")
    group.addoption("--zmesh-seed", type=int, default=None,
                    help="replay the fault plan of this seed (fault_plan fixture)")
    group.addoption("--zmesh-plan", default=None,
                    help="a fault plan as JSON: every fault_plans() strategy draws exactly it")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "zmesh_faults(**kinds): the shape of the fault_plan "
                            "fixture's plan (FaultPlan.random arguments)")
    text = config.getoption("--zmesh-plan", default=None)
    if text:
        from zmesh.testing import strategies

        strategies.REPLAY_PLAN = FaultPlan.from_json(text)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _CURRENT.update(test=item.nodeid, plan=None, faults=0, mesh=None)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item,
                              call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    plan = _CURRENT["plan"]
    if report.when != "call" or plan is None:
        return
    report.user_properties.append(("zmesh_faults", _faults_now()))
    if report.failed:
        report.sections.append(("zmesh fault plan", _replay_text(item, plan)))


def _replay_text(item: pytest.Item, plan: FaultPlan) -> str:
    seeded = "fault_plan" in getattr(item, "fixturenames", ())
    option = (f"--zmesh-seed={plan.seed}" if seeded
              else f"--zmesh-plan={shlex.quote(plan.to_json())}")
    return (f"{plan}\nseed: {plan.seed}\n"
            f"replay: python -m pytest {shlex.quote(item.nodeid)} {option}")


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int,
                            config: pytest.Config) -> None:
    lines = []
    for report in terminalreporter.stats.get("passed", []) + \
            terminalreporter.stats.get("failed", []):
        faults = dict(getattr(report, "user_properties", [])).get("zmesh_faults")
        if faults is not None and report.when == "call":
            lines.append(f"{report.nodeid}: {faults} fault(s) injected "
                         f"({report.outcome})")
    if lines:
        terminalreporter.section("zmesh faults per test")
        for line in lines:
            terminalreporter.write_line(line)
    if _RUNS:
        terminalreporter.section("zmesh fault-injection figures")
        for suite in sorted({r.suite for r in _RUNS}):
            runs = [r for r in _RUNS if r.suite == suite]
            terminalreporter.write_line(
                f"{suite}: {len(runs)} runs, {sum(r.faults for r in runs)} faults injected, "
                f"{sum(r.ops for r in runs)} operations checked, "
                f"{sum(r.violations for r in runs)} violations, "
                f"{sum(r.hung for r in runs)} operations unresolved")
            bad = [r for r in runs if r.violations or r.hung]
            if bad:
                terminalreporter.write_line(
                    "  seeds with violations or unresolved operations: "
                    + ", ".join(f"{r.seed} ({r.violations} violations, {r.hung} unresolved)"
                                for r in bad))


# -- fixtures ------------------------------------------------------------------------------
@pytest.fixture
def fault_plan(request: pytest.FixtureRequest) -> FaultPlan:
    """This test's FaultPlan: `--zmesh-seed` or a fresh seed, shaped by `zmesh_faults`."""
    seed = request.config.getoption("--zmesh-seed")
    if seed is None:
        seed = random.SystemRandom().randrange(2**32)
    marker = request.node.get_closest_marker("zmesh_faults")
    kwargs = dict(marker.kwargs) if marker is not None else {"kill_workers": True}
    plan = FaultPlan.random(seed, **kwargs)
    note_plan(plan)
    return plan


@pytest.fixture
def zmesh_cluster(fault_plan: FaultPlan) -> Iterator[Any]:
    """A LocalCluster of real processes taking `fault_plan`, a driver connected to node 0."""
    from zmesh.testing.local_cluster import LocalCluster

    mesh = LocalCluster(fault_plan.nodes, fault_plan)
    with mesh:
        note_mesh(mesh)  # the report line counts its faults when the test's call ends
        yield mesh
    leaks = mesh.leaks()
    if leaks:
        pytest.fail("the zmesh cluster left things behind: " + "; ".join(leaks))


@pytest.fixture
def zmesh_sim(fault_plan: FaultPlan) -> Iterator[Any]:
    """The simulated mesh (one process, virtual clock) taking `fault_plan`."""
    try:
        from zmesh.testing import sim_mesh
    except ImportError:
        pytest.skip("zmesh.testing.sim_mesh is not available in this zmesh")
    fault_plan.check("sim")
    with sim_mesh(nodes=fault_plan.nodes, seed=fault_plan.seed, faults=fault_plan) as mesh:
        note_mesh(mesh)
        yield mesh
