"""A restartable actor on a real node paused past its death (SIGSTOP longer than the
suspicion window): the mesh restarts it elsewhere, the node comes back and fences its old
incarnation, and no second incarnation starts there. Before, the returned node took the
fence's kill for the actor's death and restarted it locally, unknown to its home: a second
actor process ran for good (see tests/faults/test_false_node_death_actors.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import zmesh
from zmesh.testing import FaultPlan, Pause
from zmesh.testing.local_cluster import LocalCluster
from zmesh.util.scheduling_strategies import NodeAffinitySchedulingStrategy


@zmesh.remote
class Counter:
    def __init__(self) -> None:
        self.n = 0

    def bump(self) -> tuple[int, int]:
        import os

        self.n += 1
        return os.getpid(), self.n


def _until(pred: Callable[[], Any], timeout: float, what: str) -> None:
    """Poll a condition of the cluster (real processes: no virtual clock to drive)."""
    end = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.05)


def _alive(node_id: str) -> bool:
    return any(n["NodeID"] == node_id and n["Alive"] for n in zmesh.nodes())


def test_a_restartable_actor_on_a_node_paused_past_its_death_runs_once() -> None:
    plan = FaultPlan(seed=3, nodes=3, unit="step", faults=(Pause(at=1, node=1, duration=1),))
    mesh = LocalCluster(3, plan, num_cpus=2)
    with mesh:
        mesh.step()  # step 0: no fault yet
        node_id = mesh.nodes[1].node_id
        actor = Counter.options(max_restarts=-1, max_task_retries=-1,
                                scheduling_strategy=NodeAffinitySchedulingStrategy(
                                    node_id, soft=True)).remote()
        first, _ = zmesh.get(actor.bump.remote(), timeout=30)
        assert first in {w["pid"] for w in mesh._workers(1)}
        mesh.step()  # SIGSTOP node 1
        _until(lambda: not _alive(node_id), 30, "node 1 declared dead")
        mesh.step()  # SIGCONT
        _until(lambda: _alive(node_id), 30, "node 1 back")
        answers = [zmesh.get(actor.bump.remote(), timeout=30) for _ in range(5)]
        pids = {pid for pid, _ in answers}
        assert len(pids) == 1 and first not in pids, answers
        assert [n for _, n in answers] == sorted(n for _, n in answers)
        # node 1 fenced the old incarnation and started none of its own
        _until(lambda: first not in {w["pid"] for w in mesh._workers(1)}, 30,
               "the old incarnation fenced")
        hosting = [w["pid"] for i in range(3) for w in mesh._workers(i)
                   if w["actor_id"] == actor._actor_id.hex()]
        assert hosting == list(pids), (hosting, pids)
        mesh.finish()
    assert mesh.leaks() == []
