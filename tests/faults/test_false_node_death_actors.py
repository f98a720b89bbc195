"""Actors that live through a false node death, on the simulated mesh: the node is paused
until the driver's node declares it dead, then resumed (it refutes its death and the mesh
uses it again, see tests/faults/test_false_node_death.py). What a Ray user expects of an
actor whose node died holds, whatever the node does afterwards: a restartable actor is
answered by one live incarnation, a non-restartable one stays dead (no resurrection), and
the node's fenced workers are gone."""

from __future__ import annotations

from typing import Any

import pytest
from test_false_node_death import _declared_dead_and_back

import zmesh
from zmesh.exceptions import ActorDiedError
from zmesh.testing import SimMesh, sim_mesh
from zmesh.util.scheduling_strategies import NodeAffinitySchedulingStrategy


@zmesh.remote
class Counter:
    """Numbers the calls each incarnation answers."""

    def __init__(self) -> None:
        self.n = 0

    def bump(self, i: int) -> tuple[str, int, int]:
        self.n += 1
        return zmesh.get_runtime_context().get_worker_id(), self.n, i

    def where(self) -> str:
        return zmesh.get_runtime_context().get_node_id()


def _on(mesh: SimMesh, name: str, soft: bool = False) -> NodeAffinitySchedulingStrategy:
    return NodeAffinitySchedulingStrategy(node_id=mesh.nodes[name].node.node_id, soft=soft)


def _actor_workers(mesh: SimMesh, actor: Any) -> list[str]:
    """Addresses of the live workers that host `actor` now (on every live node)."""
    return [proc.client.address for n in mesh.nodes.values() if n.alive
            for info, proc in n.pool.live()
            if info.state == "actor" and info.actor_id == actor._actor_id]


def _check_incarnations(answers: list[tuple[str, int, int]]) -> None:
    """Each incarnation numbered the calls it answered 1, 2, ... in the order they were sent
    (a call retried on a new incarnation is answered there once)."""
    seen: dict[str, list[tuple[int, int]]] = {}
    for worker, n, i in answers:
        seen.setdefault(worker, []).append((i, n))
    for worker, calls in seen.items():
        calls.sort()
        numbers = [n for _, n in calls]
        assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers), \
            (worker, calls)
    assert [i for _, _, i in answers] == list(range(len(answers)))


def test_a_restartable_actor_on_a_node_taken_for_dead_is_answered_by_one_incarnation() -> None:
    with sim_mesh(nodes=3, seed=21) as mesh:
        actor = Counter.options(max_restarts=-1, max_task_retries=-1,
                                scheduling_strategy=_on(mesh, "n1", soft=True)).remote()
        answers = [zmesh.get(actor.bump.remote(i), timeout=30) for i in range(3)]
        [first] = _actor_workers(mesh, actor)
        assert first in mesh.workers("n1")
        pending = [actor.bump.remote(i) for i in range(3, 6)]
        _declared_dead_and_back(mesh, "n1")
        pending += [actor.bump.remote(i) for i in range(6, 9)]
        answers += zmesh.get(pending, timeout=60)
        answers += [zmesh.get(actor.bump.remote(i), timeout=30) for i in range(9, 12)]
        _check_incarnations(answers)
        # the fenced incarnation is gone; one incarnation lives and answers from now on
        assert mesh.run_until(lambda: first not in mesh.workers("n1"), 30), mesh.workers("n1")
        mesh.advance(2.0)
        live = _actor_workers(mesh, actor)
        assert len(live) == 1 and live[0] != first, (first, live)
        assert len({w for w, _, _ in answers[-6:]}) == 1, answers
        mesh.validate()


def test_an_actor_without_restarts_on_a_node_taken_for_dead_stays_dead() -> None:
    with sim_mesh(nodes=3, seed=22) as mesh:
        actor = Counter.options(max_restarts=0, name="solo",
                                scheduling_strategy=_on(mesh, "n1")).remote()
        assert zmesh.get(actor.bump.remote(0), timeout=30)[1] == 1
        [first] = _actor_workers(mesh, actor)
        _declared_dead_and_back(mesh, "n1")
        with pytest.raises(ActorDiedError):
            zmesh.get(actor.bump.remote(1), timeout=30)
        # the node is back: the actor is not (its worker was fenced, no second incarnation)
        assert mesh.run_until(lambda: first not in mesh.workers("n1"), 30), mesh.workers("n1")
        mesh.advance(3.0)
        assert _actor_workers(mesh, actor) == []
        for i in range(2, 4):
            with pytest.raises(ActorDiedError):
                zmesh.get(actor.bump.remote(i), timeout=30)
        # its name is free again, as Ray frees a dead actor's name
        with pytest.raises(ValueError):
            zmesh.get_actor("solo")
        again = Counter.options(name="solo", scheduling_strategy=_on(mesh, "n1")).remote()
        assert zmesh.get(again.bump.remote(0), timeout=30)[1] == 1
        assert zmesh.get(zmesh.get_actor("solo").bump.remote(1), timeout=30)[1] == 2
        mesh.validate()


@zmesh.remote
class Maker:
    """An actor that creates (and so owns) another actor, on the node it runs on."""

    def __init__(self) -> None:
        self.child: Any = None

    def make(self, restarts: int, node_id: str = "") -> Any:
        node_id = node_id or zmesh.get_runtime_context().get_node_id()
        self.child = Counter.options(
            max_restarts=restarts, max_task_retries=-1 if restarts else 0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)).remote()
        return [self.child]

    def call_child(self, i: int) -> tuple[str, int, int]:
        out: tuple[str, int, int] = zmesh.get(self.child.bump.remote(i), timeout=60)
        return out


def test_an_actor_owned_on_a_node_taken_for_dead_dies_with_its_owner() -> None:
    # The owner (an actor on n1) and the child it made (on n1 too) were given up on by the
    # mesh: the owner's death takes its actors with it (Ray's fate sharing), even after the
    # node comes back and the owner restarts elsewhere.
    with sim_mesh(nodes=3, seed=23) as mesh:
        maker = Maker.options(max_restarts=-1, max_task_retries=-1,
                              scheduling_strategy=_on(mesh, "n1", soft=True)).remote()
        [child] = zmesh.get(maker.make.remote(-1), timeout=30)
        assert zmesh.get(child.bump.remote(0), timeout=30)[1] == 1
        assert zmesh.get(maker.call_child.remote(1), timeout=30)[1] == 2
        olds = set(_actor_workers(mesh, maker) + _actor_workers(mesh, child))
        _declared_dead_and_back(mesh, "n1")
        # (a call sent before the fence reached the old child may still be answered by it)
        assert mesh.run_until(lambda: not olds & set(mesh.workers()), 30), mesh.workers()
        with pytest.raises(ActorDiedError):
            zmesh.get(child.bump.remote(2), timeout=60)
        mesh.advance(3.0)
        assert _actor_workers(mesh, child) == []
        # the restarted maker makes a new child that works
        [child2] = zmesh.get(maker.make.remote(-1), timeout=60)
        assert zmesh.get(child2.bump.remote(0), timeout=30)[1] == 1
        assert zmesh.get(maker.call_child.remote(1), timeout=30)[1] == 2
        mesh.validate()


def test_an_actor_owned_on_a_node_taken_for_dead_and_hosted_elsewhere_dies_with_it() -> None:
    # The owner (an actor on n1) made a child on n2: n2 took the child's home (n1) for dead
    # and killed it (not detached), the owner restarted elsewhere; the child stays dead
    # after n1's return and nothing of it runs anywhere.
    with sim_mesh(nodes=3, seed=34) as mesh:  # (n1 never heard of its death before)
        maker = Maker.options(max_restarts=-1, max_task_retries=-1,
                              scheduling_strategy=_on(mesh, "n1", soft=True)).remote()
        n2 = mesh.nodes["n2"].node.node_id
        [child] = zmesh.get(maker.make.remote(-1, n2), timeout=30)
        assert zmesh.get(child.bump.remote(0), timeout=30)[1] == 1
        [hosted] = _actor_workers(mesh, child)
        assert hosted in mesh.workers("n2")
        _declared_dead_and_back(mesh, "n1")
        # (n2 may not have taken n1 for dead before its return: then the child dies with
        # its owner, fenced on n1, a little later; a call meanwhile may still be answered)
        assert mesh.run_until(lambda: not _actor_workers(mesh, child), 30), \
            _actor_workers(mesh, child)
        mesh.advance(3.0)
        assert _actor_workers(mesh, child) == []
        with pytest.raises(ActorDiedError):
            zmesh.get(child.bump.remote(2), timeout=60)
        [child2] = zmesh.get(maker.make.remote(-1, n2), timeout=60)
        assert zmesh.get(maker.call_child.remote(0), timeout=30)[1] == 1
        assert zmesh.get(child2.bump.remote(1), timeout=30)[1] == 2
        mesh.validate()


def test_an_actor_pinned_to_a_node_taken_for_dead_fails_and_stays_dead() -> None:
    # Hard affinity to a node that died: the restart cannot be placed and the actor dies
    # (as Ray's does: a hard affinity to a dead node is unschedulable). The node's return
    # brings no incarnation back, and nothing of it runs there.
    with sim_mesh(nodes=3, seed=26) as mesh:
        actor = Counter.options(max_restarts=-1, max_task_retries=-1,
                                scheduling_strategy=_on(mesh, "n1")).remote()
        assert zmesh.get(actor.bump.remote(0), timeout=30)[1] == 1
        [first] = _actor_workers(mesh, actor)
        _declared_dead_and_back(mesh, "n1")
        with pytest.raises(ActorDiedError, match="hard node affinity"):
            zmesh.get(actor.bump.remote(1), timeout=60)
        assert mesh.run_until(lambda: first not in mesh.workers("n1"), 30), mesh.workers("n1")
        mesh.advance(3.0)
        assert _actor_workers(mesh, actor) == []
        with pytest.raises(ActorDiedError):
            zmesh.get(actor.bump.remote(2), timeout=60)
        mesh.validate()


def test_a_detached_named_actor_placed_on_a_node_taken_for_dead_restarts_once() -> None:
    with sim_mesh(nodes=3, seed=24) as mesh:
        actor = Counter.options(name="keeper", lifetime="detached", max_restarts=-1,
                                max_task_retries=-1,
                                scheduling_strategy=_on(mesh, "n1", soft=True)).remote()
        assert zmesh.get(actor.bump.remote(0), timeout=30)[1] == 1
        [first] = _actor_workers(mesh, actor)
        _declared_dead_and_back(mesh, "n1")
        answers = [zmesh.get(zmesh.get_actor("keeper").bump.remote(i), timeout=60)
                   for i in range(1, 5)]
        _check_incarnations([(w, n, i - 1) for w, n, i in answers])
        assert len({w for w, _, _ in answers}) == 1, answers
        assert mesh.run_until(lambda: first not in mesh.workers(), 30), mesh.workers()
        mesh.advance(3.0)
        assert len(_actor_workers(mesh, actor)) == 1
        zmesh.kill(actor)
        assert mesh.run_until(lambda: not _actor_workers(mesh, actor), 30)
        mesh.validate()


@zmesh.remote
def make_detached(name: str, node_id: str) -> int:
    """Create a detached named actor from a task (its home: this task's node)."""
    handle = Counter.options(
        name=name, lifetime="detached", max_restarts=-1, max_task_retries=-1,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)).remote()
    return int(zmesh.get(handle.bump.remote(-1), timeout=30)[1])


def test_a_detached_actor_made_on_a_node_taken_for_dead_lives_on_where_it_runs() -> None:
    # Its home (n1, where the task that made it ran) was taken for dead: n2, which hosts
    # it, became its home. It keeps answering, once, by its name, after n1's return; killed,
    # its name is free again.
    with sim_mesh(nodes=3, seed=27) as mesh:
        n2 = mesh.nodes["n2"].node.node_id
        assert zmesh.get(make_detached.options(scheduling_strategy=_on(mesh, "n1")).remote(
            "far", n2), timeout=30) == 1
        actor = zmesh.get_actor("far")
        [hosted] = _actor_workers(mesh, actor)
        answers = [zmesh.get(actor.bump.remote(0), timeout=30)]
        _declared_dead_and_back(mesh, "n1")
        answers += [zmesh.get(zmesh.get_actor("far").bump.remote(i), timeout=30)
                    for i in range(1, 4)]
        assert [n for _, n, _ in answers] == [2, 3, 4, 5], answers  # one incarnation
        mesh.advance(3.0)
        assert _actor_workers(mesh, actor) == [hosted]
        zmesh.kill(zmesh.get_actor("far"))
        assert mesh.run_until(lambda: not _actor_workers(mesh, actor), 30)
        mesh.advance(3.0)  # (the name is freed after the death, cluster-wide)
        with pytest.raises(ValueError):
            zmesh.get_actor("far")
        again = Counter.options(name="far", lifetime="detached").remote()
        assert zmesh.get(again.bump.remote(0), timeout=30)[1] == 1
        zmesh.kill(again)
        assert mesh.run_until(lambda: not _actor_workers(mesh, again), 30)
        mesh.validate()


@zmesh.remote
class Napper:
    def nap(self, seconds: float) -> str:
        from test_false_node_death_work import KERNEL

        KERNEL[0].wait_until(lambda: False, seconds)  # a nap in virtual time
        return "done"

    def hi(self) -> str:
        return "hi"


def test_a_call_in_flight_without_retries_fails_and_the_restarted_actor_answers() -> None:
    # max_task_retries=0: the call the node's death cut off fails (the actor restarts: Ray's
    # ActorUnavailableError), the fenced incarnation's late answer is not taken, and the
    # restarted actor answers the next calls.
    from test_false_node_death_work import KERNEL

    with sim_mesh(nodes=3, seed=28) as mesh:
        KERNEL.append(mesh.kernel)
        try:
            actor = Napper.options(max_restarts=-1, max_task_retries=0,
                                   scheduling_strategy=_on(mesh, "n1", soft=True)).remote()
            assert zmesh.get(actor.hi.remote(), timeout=30) == "hi"
            inflight = actor.nap.remote(5.0)
            mesh.advance(0.05)
            _declared_dead_and_back(mesh, "n1")
            with pytest.raises(zmesh.exceptions.ActorUnavailableError):
                zmesh.get(inflight, timeout=30)
            mesh.advance(6.0)  # past the nap
            with pytest.raises(zmesh.exceptions.ActorUnavailableError):
                zmesh.get(inflight, timeout=30)
            assert zmesh.get(actor.hi.remote(), timeout=30) == "hi"
            assert len(_actor_workers(mesh, actor)) == 1
            mesh.validate()
        finally:
            KERNEL.clear()
