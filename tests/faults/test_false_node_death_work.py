"""Tasks, placement groups and objects through a false node death, on the simulated mesh: the
node is paused until the driver's node declares it dead, then resumed (it refutes its death
and the mesh uses it again, see tests/faults/test_false_node_death.py). Ray's rules for a
node that died hold, and the returned node keeps nothing of what the others gave up on:
its fenced workers' resources, leases, objects and pins all go."""

from __future__ import annotations

import gc
from typing import Any

import numpy as np
import pytest
from runtime_program import leftovers
from test_false_node_death import _declared_dead_and_back

import zmesh
from zmesh.exceptions import NodeDiedError, WorkerCrashedError
from zmesh.testing import SimMesh, sim_mesh
from zmesh.util.placement_group import placement_group, remove_placement_group
from zmesh.util.scheduling_strategies import (
    NodeAffinitySchedulingStrategy,
    PlacementGroupSchedulingStrategy,
)

KERNEL: list[Any] = []  # the mesh's kernel, for a nap in virtual time inside a task
STARTS: dict[str, int] = {}


def _on(mesh: SimMesh, name: str, soft: bool = False) -> NodeAffinitySchedulingStrategy:
    return NodeAffinitySchedulingStrategy(node_id=mesh.nodes[name].node.node_id, soft=soft)


@zmesh.remote
def slow(key: str, v: int, seconds: float) -> tuple[int, str]:
    # (remote functions travel by value: reach this module's own tables by import)
    from test_false_node_death_work import KERNEL, STARTS

    STARTS[key] = STARTS.get(key, 0) + 1
    KERNEL[0].wait_until(lambda: False, seconds)  # a nap in virtual time
    return v * 2, zmesh.get_runtime_context().get_node_id()


@zmesh.remote
def where() -> str:
    return zmesh.get_runtime_context().get_node_id()


@zmesh.remote
def make_big(n: int) -> Any:
    return np.arange(n)  # the caller owns it; stored where this runs


@zmesh.remote
def total(arr: Any) -> int:
    return int(arr.sum())


def _all_free(mesh: SimMesh) -> bool:
    for n in mesh.nodes.values():
        if n.alive:
            total_, free = n.node.scheduler.total(), n.node.scheduler.available()
            if abs(free.get("CPU", 0.0) - total_.get("CPU", 0.0)) > 1e-9:
                return False
    return True


def _clean(mesh: SimMesh) -> None:
    """Nothing owned, stored, pinned, leased or held anywhere once every ref is gone."""
    gc.collect()
    assert mesh.run_until(lambda: not leftovers(mesh) and _all_free(mesh), 40.0), \
        (leftovers(mesh), {k: n.node.scheduler.available() for k, n in mesh.nodes.items()})
    mesh.validate()


@pytest.fixture(autouse=True)
def _kernel_and_counts() -> Any:
    STARTS.clear()
    yield
    KERNEL.clear()


def test_a_task_without_retries_running_on_a_node_taken_for_dead_fails_as_its_node_died() -> None:
    with sim_mesh(nodes=3, seed=31) as mesh:
        KERNEL.append(mesh.kernel)
        ref = slow.options(max_retries=0, scheduling_strategy=_on(mesh, "n1")).remote("a", 1, 5.0)
        assert mesh.run_until(lambda: STARTS.get("a") == 1, 30)
        _declared_dead_and_back(mesh, "n1")
        with pytest.raises((NodeDiedError, WorkerCrashedError)):
            zmesh.get(ref, timeout=30)
        mesh.advance(6.0)  # past the nap: the fenced attempt answers nothing
        assert STARTS["a"] == 1
        with pytest.raises((NodeDiedError, WorkerCrashedError)):
            zmesh.get(ref, timeout=30)
        del ref
        _clean(mesh)


def test_a_task_with_retries_on_a_node_taken_for_dead_runs_again_once_and_answers() -> None:
    with sim_mesh(nodes=3, seed=32) as mesh:
        KERNEL.append(mesh.kernel)
        n1 = mesh.nodes["n1"].node.node_id
        ref = slow.options(max_retries=1, scheduling_strategy=_on(mesh, "n1", soft=True)).remote(
            "b", 21, 5.0)
        assert mesh.run_until(lambda: STARTS.get("b") == 1, 30)
        _declared_dead_and_back(mesh, "n1")
        value, node = zmesh.get(ref, timeout=60)
        assert value == 42
        mesh.advance(6.0)
        assert STARTS["b"] == 2, STARTS  # the first attempt and one retry, no more
        # a task placed on the returned node runs there
        assert zmesh.get(where.options(scheduling_strategy=_on(mesh, "n1")).remote(),
                         timeout=30) == n1
        assert node in {n.node.node_id for n in mesh.nodes.values()}
        del ref
        _clean(mesh)


def test_a_placement_group_with_a_bundle_on_a_node_taken_for_dead_is_placed_again() -> None:
    with sim_mesh(nodes=3, seed=33) as mesh:
        pg = placement_group([{"CPU": 1}] * 3, strategy="STRICT_SPREAD")
        assert zmesh.get(pg.ready(), timeout=30)
        nodes = {zmesh.get(where.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
            pg, i)).remote(), timeout=30) for i in range(3)}
        assert len(nodes) == 3
        _declared_dead_and_back(mesh, "n1")
        # it is placed again over the three nodes (pending while only two were live)
        assert pg.wait(30)
        for _ in range(2):
            got = {zmesh.get(where.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
                pg, i)).remote(), timeout=60) for i in range(3)}
            assert got == nodes
        mesh.validate()
        # every node's CPU: one in the group's bundle, one free (nothing kept for the old one)
        assert mesh.run_until(lambda: all(
            n.node.scheduler.available().get("CPU") == 1.0 for n in mesh.nodes.values()), 30), \
            {k: n.node.scheduler.available() for k, n in mesh.nodes.items()}
        remove_placement_group(pg)
        del pg
        _clean(mesh)


def _cut_off_and_back(mesh: SimMesh, name: str) -> None:
    """Cut node `name` off from the others until the driver's node declared it dead (it
    declares them dead too), then heal and wait until the driver's node counts it alive."""
    head = mesh.nodes["n0"].node.mesh
    assert head is not None
    node_id = mesh.nodes[name].node.node_id
    mesh.partition([name], [n for n in mesh.nodes if n != name])
    assert mesh.run_until(lambda: node_id in head.dead_nodes, timeout=30), mesh.story(30)
    mesh.heal()
    assert mesh.run_until(lambda: node_id not in head.dead_nodes, timeout=30), mesh.story(30)


@pytest.mark.parametrize("seed", [0, 1, 9, 11])
def test_a_group_whose_coordinator_a_cut_off_node_took_for_dead_runs_its_work_there(
        seed: int) -> None:
    # n1, cut off, took n0 (the group's coordinator) for dead and gave the group up as
    # removed. After the heal n0 placed n1's bundle there again, but n1's scheduler kept
    # the group for removed and failed every task in it for good ('its placement group
    # ... was removed'). Seeds 1, 9, 11: a node released its bundle as it took n0 for dead
    # on n1's rumour, or as n1's rumour got it declared dead itself, while n0 never saw it
    # die and kept counting the bundle as held there; tasks in it waited for good. It now
    # tells n0 (BundlesLost), which places the bundle again.
    with sim_mesh(nodes=3, seed=seed) as mesh:
        pg = placement_group([{"CPU": 1}] * 3, strategy="STRICT_SPREAD")
        assert zmesh.get(pg.ready(), timeout=30)
        strategies = [PlacementGroupSchedulingStrategy(pg, i) for i in range(3)]
        nodes = [zmesh.get(where.options(scheduling_strategy=s).remote(), timeout=30)
                 for s in strategies]
        _cut_off_and_back(mesh, "n1")
        assert pg.wait(30)
        for _ in range(2):
            got = zmesh.get([where.options(scheduling_strategy=s).remote() for s in strategies],
                            timeout=60)
            assert got == nodes
        mesh.validate()
        remove_placement_group(pg)
        del pg, strategies
        _clean(mesh)


def test_a_packed_group_over_every_node_waits_for_the_node_taken_for_dead() -> None:
    # Three bundles of a whole node each: packed, they still need all three nodes; while n1
    # is taken for dead the group cannot fit (pending), and it is created again on its return.
    with sim_mesh(nodes=3, seed=34) as mesh:
        pg = placement_group([{"CPU": 2}] * 3, strategy="PACK")
        assert zmesh.get(pg.ready(), timeout=30)
        strategies = [PlacementGroupSchedulingStrategy(pg, i) for i in range(3)]
        nodes = [zmesh.get(where.options(scheduling_strategy=s).remote(), timeout=30)
                 for s in strategies]
        assert len(set(nodes)) == 3
        _declared_dead_and_back(mesh, "n1")
        assert pg.wait(30)
        for _ in range(2):
            got = zmesh.get([where.options(scheduling_strategy=s).remote() for s in strategies],
                            timeout=60)
            assert set(got) == set(nodes)
        mesh.validate()
        remove_placement_group(pg)
        del pg, strategies  # (a strategy keeps its group, and so its ready ref)
        _clean(mesh)


def test_objects_on_a_node_taken_for_dead_are_all_gone_once_their_refs_are() -> None:
    with sim_mesh(nodes=3, seed=35) as mesh:
        on_n1 = _on(mesh, "n1")
        # a primary on n1 (a task's return the driver owns), and a copy n1 pulled of a put
        made = make_big.options(scheduling_strategy=on_n1).remote(200_000)
        put = zmesh.put(np.arange(300_000))
        assert zmesh.get(total.options(scheduling_strategy=on_n1).remote(put),
                         timeout=30) == 299_999 * 300_000 // 2
        assert zmesh.get(total.options(scheduling_strategy=_on(mesh, "n2")).remote(made),
                         timeout=30) == 199_999 * 200_000 // 2
        assert mesh.nodes["n1"].node.store.stats().num_objects == 2
        _declared_dead_and_back(mesh, "n1")
        # the return whose primary was on n1 is made again (lineage) or reads as lost
        try:
            assert zmesh.get(made, timeout=60).sum() == 199_999 * 200_000 // 2
        except zmesh.exceptions.ObjectLostError:
            pass
        assert zmesh.get(total.options(scheduling_strategy=on_n1).remote(put),
                         timeout=30) == 299_999 * 300_000 // 2
        del made, put
        _clean(mesh)


@zmesh.remote
def own_put(n: int) -> list[Any]:
    return [zmesh.put(np.arange(n))]  # owned by this task's worker, stored on its node


def test_an_object_owned_by_a_worker_of_a_node_taken_for_dead_reads_as_its_owner_died() -> None:
    # Its owner (a worker fenced on the node's return) is gone for the mesh: the driver's
    # borrowed ref reads OwnerDiedError, and nothing of the object stays anywhere.
    with sim_mesh(nodes=3, seed=36) as mesh:
        [inner] = zmesh.get(own_put.options(scheduling_strategy=_on(mesh, "n1")).remote(
            100_000), timeout=30)
        assert int(zmesh.get(inner, timeout=30).sum()) == 99_999 * 100_000 // 2
        _declared_dead_and_back(mesh, "n1")
        with pytest.raises(zmesh.exceptions.OwnerDiedError):
            zmesh.get(inner, timeout=30)
        del inner
        _clean(mesh)
