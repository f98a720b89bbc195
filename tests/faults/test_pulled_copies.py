"""Copies a node pulled for its readers go when the object goes, on the simulated mesh, even
when the node they were pulled from dies: a dead owner's objects are freed by every node
that stores them, a live owner's free reaches every live node when the primary's holder is
dead (see zmesh/core/stored_owners.py and zmesh/runtime/node/objects.py)."""

from __future__ import annotations

import gc
from typing import Any

import numpy as np
from runtime_program import leftovers, run_schedule

import zmesh
from zmesh.errors import ZmeshError
from zmesh.protocol.messages import runtime as m
from zmesh.testing import sim_mesh
from zmesh.util.scheduling_strategies import NodeAffinitySchedulingStrategy


def _on(mesh: Any, name: str) -> NodeAffinitySchedulingStrategy:
    return NodeAffinitySchedulingStrategy(node_id=mesh.nodes[name].node.node_id, soft=False)


def _stored(mesh: Any, name: str) -> int:
    """Objects the node's store keeps: live ones and freed ones still pinned."""
    stats = mesh.nodes[name].node.store.stats()
    return int(stats.num_objects + stats.num_pinned)


def _live(mesh: Any, name: str) -> int:
    return int(mesh.nodes[name].node.store.stats().num_objects)


@zmesh.remote
class BigMaker:
    def make(self) -> list[Any]:
        return [zmesh.put(np.arange(200_000))]  # owned by this actor, stored on its node


@zmesh.remote
def make_big() -> Any:
    return np.arange(200_000)  # the driver owns it, stored where this runs


@zmesh.remote
def total(arr: Any) -> int:
    return int(arr.sum())


def test_a_copy_pulled_from_an_owner_whose_node_dies_is_freed() -> None:
    # A maker actor on n2 puts a big array it owns; the driver on n0 reads it (n0 pulls a
    # copy; the driver keeps an idle pin on it), drops its ref, and n2 is killed before the
    # owner's free comes. Before, n0 kept the copy for good: only the objects allocated on a
    # node were freed when their owner died, and the free of a copy came through its holder.
    with sim_mesh(nodes=3, seed=3) as mesh:
        maker = BigMaker.options(scheduling_strategy=_on(mesh, "n2")).remote()
        [ref] = zmesh.get(maker.make.remote(), timeout=30)
        assert int(zmesh.get(ref, timeout=30).sum()) == 199_999 * 200_000 // 2
        assert _live(mesh, "n0") == 1
        mesh.pause_node("n2")  # the owner hears nothing more: its free never comes
        del ref
        gc.collect()
        mesh.advance(0.5)
        assert _live(mesh, "n0") == 1
        mesh.kill_node("n2")
        assert mesh.run_until(lambda: _stored(mesh, "n0") == 0, 30.0), leftovers(mesh)
        del maker


def test_a_copy_pulled_from_a_dead_holder_is_freed_by_its_live_owner() -> None:
    # The driver on n0 owns a task's return made on n2; a task on n1 reads it (n1 pulls a
    # copy, its worker keeps an idle pin), then n2 is killed and the driver drops the ref.
    # The owner lives and frees it, but its free went only to the dead holder, which alone
    # knew who pulled copies: before, n1 kept its copy for good.
    with sim_mesh(nodes=3, seed=4) as mesh:
        ref = make_big.options(scheduling_strategy=_on(mesh, "n2")).remote()
        assert zmesh.get(total.options(scheduling_strategy=_on(mesh, "n1")).remote(ref),
                         timeout=30) == 199_999 * 200_000 // 2
        assert _live(mesh, "n1") == 1
        mesh.kill_node("n2")
        mesh.advance(15.0)  # every node takes n2 for dead
        try:
            zmesh.get(ref, timeout=5)  # lost with n2 (n0 has no copy)
        except ZmeshError:
            pass
        assert _live(mesh, "n1") == 1  # the owner still holds the ref
        del ref
        gc.collect()
        assert mesh.run_until(lambda: _stored(mesh, "n1") == 0, 30.0), leftovers(mesh)


def test_a_free_the_holder_died_before_handling_still_reaches_the_copies() -> None:
    # As above, but the driver drops the ref while n2 is paused and still taken for live:
    # n0 forwards the free to n2, which dies with it unhandled. n0 remembers the frees it
    # forwarded lately and sends them to every live node once n2 is found dead; before, n1
    # kept its copy for good.
    with sim_mesh(nodes=3, seed=4) as mesh:
        ref = make_big.options(scheduling_strategy=_on(mesh, "n2")).remote()
        assert zmesh.get(total.options(scheduling_strategy=_on(mesh, "n1")).remote(ref),
                         timeout=30) == 199_999 * 200_000 // 2
        assert _live(mesh, "n1") == 1
        mesh.pause_node("n2")
        del ref
        gc.collect()
        mesh.advance(0.2)  # the free went to n2, which handles nothing
        mesh.kill_node("n2")
        assert mesh.run_until(lambda: _stored(mesh, "n1") == 0, 30.0), leftovers(mesh)


# Found by random hand_on schedules (seed 2195 of the mix in test_borrow_hand_off, steps
# shrunk by hand): a ref owned by a worker on n2 was handed on to the driver, which read it
# (a copy pulled to n0, kept by the driver's idle pin); n2 was killed, the owner with it,
# and n0 stored the copy for good once every ref was gone ('n0 stores 1 objects').
_PULLED_COPY_SEED = 2195
_PULLED_COPY_STEPS: list[tuple[Any, ...]] = [
    ('kill_worker',),
    ('kill_worker',),
    ('pause', 'n1', 5.0),
    ('kill_node', 'n1'),
    ('hand_on', 100),
    ('hand_on', 100),
    ('kill_worker',),
    ('get', 16),
    ('kill_node', 'n1'),
    ('kill_worker',),
    ('kill_node', 'n2'),
    ('get', 89)]


def test_a_copy_pulled_from_a_handed_on_ref_whose_owner_node_died_is_freed() -> None:
    violations, mesh = run_schedule(_PULLED_COPY_SEED, _PULLED_COPY_STEPS)
    assert not violations, "\n".join(violations) + f"\nstory:\n{mesh.story(80)}"


# Found by random hand_on schedules (a seed loop beyond the 60 of test_borrow_hand_off): a
# worker on n0 was killed while its AllocObject was held back on a slow link; the node
# released what it wrote, then allocated the late request for it, unsealed and owned by a
# dead process, for good ('n0 stores 1 objects'). A node now allocates only for
# its live processes.
_LATE_ALLOC_SEED = 18728
_LATE_ALLOC_STEPS: list[tuple[Any, ...]] = [
    ('get', 76),
    ('hand_on', 70),
    ('forget', 1),
    ('get', 26),
    ('link_kinds', ['HandOffBorrow'], 0.0, 0.5, 0.0, 5.0),
    ('hand_on', 61),
    ('link_kinds', ['HandOffBorrow'], 0.0, 0.5, 0.0, 1.0),
    ('hand_on', 61),
    ('advance', 0.01),
    ('forget', 86),
    ('forget', 86),
    ('kill_worker',),
    ('pause', 'n0', 1.0),
    ('link', 0.05, 0.1, 0.3, 0.1, 0.2),
    ('pause', 'n2', 5.0),
    ('link_kinds', ['AskHandOff'], 1.0, 0.0, 0.5, 1.0),
    ('hand_on', 12),
    ('advance', 0.01),
    ('kill_worker',),
    ('link_kinds', ['AskHandOff'], 1.0, 0.0, 0.5, 1.0)]


def test_a_late_allocation_from_a_killed_writer_stores_nothing() -> None:
    violations, mesh = run_schedule(_LATE_ALLOC_SEED, _LATE_ALLOC_STEPS)
    assert not violations, "\n".join(violations) + f"\nstory:\n{mesh.story(80)}"


def test_a_late_pin_from_a_reader_the_node_released_keeps_nothing() -> None:
    # A PinObject that comes after its reader was released (killed while the request was
    # held back) used to pin the object for a process nobody would ask to give it back:
    # freed by its owner, it stayed stored, pinned, for good.
    with sim_mesh(nodes=2, seed=3) as mesh:
        ref = zmesh.put(np.arange(200_000))
        oid = ref.id
        node = mesh.nodes["n0"].node
        ghost = "sim://n0/w-gone"
        assert ghost not in node.clients
        node.loop.call_soon(node.objects.on_pin, ghost, m.PinObject(
            request_id=1, object_id=oid, client=ghost), [])
        mesh.advance(0.5)
        del ref
        gc.collect()
        assert mesh.run_until(lambda: _stored(mesh, "n0") == 0, 30.0), leftovers(mesh)
