"""zmesh.kill on an actor that lives on another node: it dies at once and for good, and a
later call on any handle to it (the creating one, or one from get_actor, used before the
kill or not) fails with ActorDiedError, as Ray's ray.kill (no_restart=True) does."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator

import pytest

import zmesh
from zmesh.actor import ActorHandle
from zmesh.exceptions import ActorDiedError
from zmesh.testing import Cluster
from zmesh.util import state


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    c.add_node(num_cpus=1, resources={"far": 8})
    zmesh.init(address=c.address, namespace="kills")
    yield c
    zmesh.shutdown()
    c.shutdown()


@zmesh.remote(num_cpus=0, resources={"far": 1})
class Far:
    def node(self) -> str:
        return zmesh.get_runtime_context().get_node_id()


def _far_address(cluster: Cluster) -> str:
    return next(n.address for n in cluster.list_all_nodes() if n is not cluster.head_node)


def _assert_killed(handle: ActorHandle) -> None:
    """Calls fail, and the mesh reports the actor dead (it did not only fail here)."""
    with pytest.raises(ActorDiedError):
        zmesh.get(handle.node.remote(), timeout=30)  # type: ignore[attr-defined]
    _wait_dead(handle._actor_id)


def _wait_dead(actor_id: bytes) -> None:
    deadline = time.monotonic() + 30
    row = state.get_actor(actor_id)
    while (row is None or row["state"] != "DEAD") and time.monotonic() < deadline:
        time.sleep(0.05)  # polling the mesh's view: no event to wait on from here
        row = state.get_actor(actor_id)
    assert row is not None and row["state"] == "DEAD", row


@pytest.mark.parametrize("called_first", [True, False])
@pytest.mark.parametrize("kill_with", ["get_actor", "creator"])
def test_kill_of_an_actor_this_driver_made_on_another_node(
        cluster: Cluster, kill_with: str, called_first: bool) -> None:
    name = f"far-{kill_with}-{called_first}"
    orig = Far.options(name=name, lifetime="detached").remote()
    assert zmesh.get(orig.node.remote(), timeout=30) != zmesh.get_runtime_context().get_node_id()
    h = zmesh.get_actor(name)
    if called_first:
        zmesh.get(h.node.remote(), timeout=30)
    zmesh.kill(h if kill_with == "get_actor" else orig)
    _assert_killed(h)
    _assert_killed(orig)


@pytest.mark.parametrize("called_first", [True, False])
@pytest.mark.parametrize("max_restarts", [0, -1])
def test_kill_of_an_actor_another_driver_made_on_another_node(
        cluster: Cluster, called_first: bool, max_restarts: int) -> None:
    """The regression: a handle from get_actor, never called here, for an actor homed on
    another node: this node knew nothing of it and dropped the kill; it lived on."""
    name = f"far-other-{called_first}-{max_restarts}"
    code = textwrap.dedent(f"""
        import zmesh
        zmesh.init(address={_far_address(cluster)!r}, namespace="kills")
        @zmesh.remote(num_cpus=0, resources={{"far": 1}})
        class Far:
            def node(self): return "x"
        a = Far.options(name={name!r}, lifetime="detached",
                        max_restarts={max_restarts}).remote()
        print("made", zmesh.get(a.node.remote(), timeout=30))
        zmesh.shutdown()
        """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and "made x" in proc.stdout, proc.stderr[-3000:]
    h = zmesh.get_actor(name)
    if called_first:
        assert zmesh.get(h.node.remote(), timeout=30) == "x"
    zmesh.kill(h)
    _assert_killed(h)


def test_a_node_passes_a_kill_for_an_actor_it_does_not_know_to_its_home(
        cluster: Cluster) -> None:
    """The node side alone: a KillActor reaching a node that holds no entry for the actor
    (no handle there subscribed yet, or its lookup is still on the way) goes to its home."""
    from zmesh.protocol.messages import runtime as m
    from zmesh.runtime import context

    code = textwrap.dedent(f"""
        import zmesh
        zmesh.init(address={_far_address(cluster)!r}, namespace="kills")
        @zmesh.remote(num_cpus=0, resources={{"far": 1}})
        class Far:
            def node(self): return "x"
        a = Far.options(name="far-bare", lifetime="detached").remote()
        print("made", zmesh.get(a.node.remote(), timeout=30), a._actor_id.hex())
        zmesh.shutdown()
        """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and "made x" in proc.stdout, proc.stderr[-3000:]
    actor_id = bytes.fromhex(proc.stdout.split()[-1])
    client = context.current_client()
    client.loop.send_threadsafe(client.node_address, m.KillActor(actor_id=actor_id,
                                                                 no_restart=True))
    _wait_dead(actor_id)
