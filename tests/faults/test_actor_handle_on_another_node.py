"""A handle the driver passes to a task on another node works there at once, on the
simulated mesh (deterministic by seed).

The driver's node (n0) is the actor's home: it publishes `actor/<id>` in the control store
fire-and-forget when the driver's CreateActor lands. A task on n1 that calls the actor makes
n1 look that record up; its get can reach the record's shard before the home's put does
(they come from different nodes). n1 took that first "not found" as final and, after the
grace, told the caller "no node knows this actor" (seeds 0, 2, 4, 6 before the fix). It now
asks again while the caller waits; an actor that really died still fails within the grace.
"""

from __future__ import annotations

from typing import Any

import pytest

import zmesh
from zmesh.errors import ActorDiedError
from zmesh.runtime.node.actors import UNKNOWN_ACTOR_GRACE_S
from zmesh.testing import sim_mesh
from zmesh.util.scheduling_strategies import NodeAffinitySchedulingStrategy


@zmesh.remote
class Echo:
    def ping(self, v: int) -> int:
        return v


@zmesh.remote
def call(echo: Any, v: int) -> int:
    return int(zmesh.get(echo.ping.remote(v), timeout=60))


def _on(mesh: Any, name: str) -> NodeAffinitySchedulingStrategy:
    return NodeAffinitySchedulingStrategy(node_id=mesh.nodes[name].node.node_id, soft=False)


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4, 5, 6, 7])
def test_a_task_on_another_node_calls_an_actor_the_driver_just_created(seed: int) -> None:
    with sim_mesh(nodes=3, seed=seed) as mesh:
        echo = Echo.options(scheduling_strategy=_on(mesh, "n2")).remote()
        task = call.options(scheduling_strategy=_on(mesh, "n1")).remote(echo, seed)
        assert zmesh.get(task, timeout=60) == seed
        assert zmesh.get(echo.ping.remote(7), timeout=30) == 7


@pytest.mark.parametrize("seed", [0, 2, 4, 6])
def test_a_handle_to_an_actor_that_died_fails_on_another_node_within_the_grace(
        seed: int) -> None:
    with sim_mesh(nodes=3, seed=seed) as mesh:
        echo = Echo.options(scheduling_strategy=_on(mesh, "n2")).remote()
        assert zmesh.get(echo.ping.remote(1), timeout=30) == 1
        zmesh.kill(echo)
        with pytest.raises(ActorDiedError):
            zmesh.get(echo.ping.remote(2), timeout=30)
        start = mesh.now
        task = call.options(scheduling_strategy=_on(mesh, "n1")).remote(echo, 3)
        with pytest.raises(ActorDiedError):
            zmesh.get(task, timeout=60)
        assert mesh.now - start < UNKNOWN_ACTOR_GRACE_S + 2.0  # virtual seconds
