"""zmesh under chaos, real processes: seeded runs of kills, a pause, a node death and 5% drop.

Each run checks that every get returned the right value or a documented zmesh error within
30 s (never a wrong value), that each caller's actor calls ran in submission order, and that
nothing is left behind after shutdown. Figures are printed at the end of the test run.
Longer soaks run with --slow.
"""

from __future__ import annotations

import pytest
from chaos_workload import GET_BOUND, chaos_plan, run_workload

from zmesh.testing import FaultPlan, LinkFault, Pause
from zmesh.testing.local_cluster import LocalCluster
from zmesh.testing.plugin import record_run

SEEDS = list(range(25))
SOAK_SEEDS = list(range(100, 110))


def _run(seed: int, duration: float, bound: float, plan: FaultPlan | None = None) -> None:
    plan = plan if plan is not None else chaos_plan(seed, duration)
    mesh = LocalCluster(3, plan, num_cpus=2)
    with mesh:
        history = run_workload(mesh, duration, bound)
        mesh.finish()
    leaks = mesh.leaks()
    violations = history.violations(get_bound=bound + duration + 5)
    record_run("real-process chaos", seed=seed, plan=plan, faults=mesh.faults_injected(),
               ops=len(history.ops), violations=len(violations) + len(leaks),
               hung=sum(1 for op in history.ops if op.status == "indeterminate"))
    problems = [str(v) for v in violations] + leaks
    # Hangs fail too: a lost message between nodes (5% drop) is sent again (leases forwarded
    # and returned, their grants), so every get resolves within the bound.
    assert not problems, (f"seed {seed}:\n{plan}\n{mesh.report()}\n" + "\n".join(problems[:20]))


@pytest.mark.parametrize("seed", SEEDS)
def test_chaos_run_keeps_every_invariant(seed: int) -> None:
    # The bound: every get resolves within 30 s. (It was 10 s here to save CI time
    # on hangs; on a loaded 2-core runner a slow but live recovery, an owner probe then a
    # re-ask, could pass 10 s. A run with nothing stuck costs the same either way.)
    _run(seed, duration=2.5, bound=GET_BOUND)


def test_a_node_paused_past_its_death_is_used_again_once_it_is_back() -> None:
    # Seed 7 failed in CI: node 1 was paused just past the suspicion window (0.8 s at three
    # nodes), declared dead, and refuted its death on resume; every read task placed on it
    # afterwards failed ("took it for dead and dropped its borrow"). Here the pause is long
    # enough for the death to be certain and the workload goes on after the return.
    plan = FaultPlan(seed=7, nodes=3, faults=(
        Pause(at=0.3, node=1, duration=1.5),
        LinkFault(at=0.0, kind="drop", rate=0.05, duration=4.0)))
    _run(7, duration=4.0, bound=GET_BOUND, plan=plan)


@pytest.mark.soak
@pytest.mark.parametrize("seed", SOAK_SEEDS)
def test_chaos_soak_keeps_every_invariant(seed: int) -> None:
    _run(seed, duration=30.0, bound=GET_BOUND)
