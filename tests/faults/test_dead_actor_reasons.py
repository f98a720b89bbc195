"""A caller on another node that calls an actor after it died hears why it died, on the
simulated mesh (deterministic by seed).

The actor's home node removed the actor's `actor/<id>` record when it died; a node that had
not followed the actor before found no record, and after the grace told its caller "no node
knows this actor" whatever the cause (every test here failed so before). The home now leaves
a record that says why (`ActorDirectory.record_death`), for the latest DEAD_ACTORS_KEPT.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import zmesh
from zmesh.runtime.node import names
from zmesh.testing import SimMesh, sim_mesh
from zmesh.util.scheduling_strategies import NodeAffinitySchedulingStrategy


@zmesh.remote
class Echo:
    def ping(self, v: int) -> int:
        return v


class InitBroke(Exception):
    pass


@zmesh.remote
class Broken:
    def __init__(self) -> None:
        raise InitBroke("no config")

    def ping(self, v: int) -> int:
        return v


@zmesh.remote
def call(actor: Any, v: int) -> tuple[str, bool, str]:
    """What a caller on this node sees: the error's classes, whether it is an
    ActorDiedError, and its text."""
    try:
        zmesh.get(actor.ping.remote(v), timeout=60)
    except Exception as exc:
        return (" ".join(c.__name__ for c in type(exc).__mro__),
                isinstance(exc, zmesh.exceptions.ActorDiedError), str(exc))
    return "", False, "answered"


def _on(mesh: SimMesh, name: str) -> NodeAffinitySchedulingStrategy:
    return NodeAffinitySchedulingStrategy(node_id=mesh.nodes[name].node.node_id, soft=False)


def _seen_on_n1(mesh: SimMesh, actor: Any) -> tuple[str, bool, str]:
    out: tuple[str, bool, str] = zmesh.get(
        call.options(scheduling_strategy=_on(mesh, "n1")).remote(actor, 3), timeout=60)
    return out


def _dead_on_n2(mesh: SimMesh, how: Callable[[SimMesh, Any], None]) -> Any:
    echo = Echo.options(scheduling_strategy=_on(mesh, "n2")).remote()
    assert zmesh.get(echo.ping.remote(1), timeout=30) == 1
    how(mesh, echo)
    with pytest.raises(zmesh.exceptions.ActorDiedError):
        zmesh.get(echo.ping.remote(2), timeout=30)  # the owner heard of the death
    return echo


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_caller_elsewhere_hears_the_actor_was_killed(seed: int) -> None:
    with sim_mesh(nodes=3, seed=seed) as mesh:
        echo = _dead_on_n2(mesh, lambda mesh, a: zmesh.kill(a))
        kind, died, text = _seen_on_n1(mesh, echo)
        assert died and "killed by zmesh.kill()" in text, (kind, text)


@pytest.mark.parametrize("seed", [0, 1])
def test_a_caller_elsewhere_hears_the_actors_process_died(seed: int) -> None:
    with sim_mesh(nodes=3, seed=seed) as mesh:
        echo = _dead_on_n2(mesh, lambda mesh, a: mesh.kill_actor(a))
        kind, died, text = _seen_on_n1(mesh, echo)
        assert died and "killed by signal 9" in text, (kind, text)


@pytest.mark.parametrize("seed", [0, 1])
def test_a_caller_elsewhere_hears_the_actors_node_died(seed: int) -> None:
    with sim_mesh(nodes=3, seed=seed) as mesh:
        node_id = mesh.nodes["n2"].node.node_id
        echo = _dead_on_n2(mesh, lambda mesh, a: mesh.kill_node("n2"))
        kind, died, text = _seen_on_n1(mesh, echo)
        assert died and f"its node {node_id}" in text, (kind, text)


@pytest.mark.parametrize("seed", [0, 1])
def test_a_caller_elsewhere_gets_what_the_constructor_raised(seed: int) -> None:
    with sim_mesh(nodes=3, seed=seed) as mesh:
        broken = Broken.options(scheduling_strategy=_on(mesh, "n2")).remote()
        with pytest.raises(InitBroke):
            zmesh.get(broken.ping.remote(1), timeout=30)
        kind, died, text = _seen_on_n1(mesh, broken)
        assert "InitBroke" in kind.split() and died and "no config" in text, (kind, text)


def test_only_the_latest_dead_actors_are_remembered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(names, "DEAD_ACTORS_KEPT", 2)
    with sim_mesh(nodes=3, seed=0) as mesh:
        actors = [_dead_on_n2(mesh, lambda mesh, a: zmesh.kill(a)) for _ in range(3)]
        home = mesh.nodes["n0"].node.actors
        assert actors[0]._actor_id not in home.actors  # forgotten: entry and record
        assert all(a._actor_id in home.actors for a in actors[1:])
        kind, died, text = _seen_on_n1(mesh, actors[0])
        assert died and "no node knows this actor" in text, (kind, text)
        kind, died, text = _seen_on_n1(mesh, actors[2])
        assert died and "killed by zmesh.kill()" in text, (kind, text)


@zmesh.remote(max_restarts=0)
class Parent:
    def child(self, where: Any) -> list[Any]:
        self.kept = Echo.options(scheduling_strategy=where).remote()
        return [self.kept]


@pytest.mark.parametrize("seed", [0, 1])
def test_a_caller_hears_an_actor_died_with_its_owner_not_that_it_was_killed(seed: int) -> None:
    # The owner's node stops the actor on the node hosting it with a KillActor; that node
    # took every KillActor for a zmesh.kill() and said so to every caller afterwards.
    with sim_mesh(nodes=3, seed=seed) as mesh:
        parent = Parent.options(scheduling_strategy=_on(mesh, "n1")).remote()
        [child] = zmesh.get(parent.child.remote(_on(mesh, "n2")), timeout=30)
        assert zmesh.get(child.ping.remote(1), timeout=30) == 1
        assert mesh.kill_actor(parent)
        died: list[str] = []

        def dead() -> bool:  # (a ping may get there before the news of the owner's death)
            try:
                zmesh.get(child.ping.remote(2), timeout=30)
            except zmesh.exceptions.ActorDiedError as exc:
                died.append(str(exc))
            return bool(died)

        assert mesh.run_until(dead, timeout=60), mesh.story(30)
        assert "owner died" in died[0] and "zmesh.kill()" not in died[0], died[0]
