"""On a real 2-node mesh, a caller on the other node that calls an actor after it died hears
why it died (its process exited with its code, it was killed by zmesh.kill), not "no node
knows this actor": the actor's home node (the driver's) now leaves a record of the cause
in the control store (see tests/faults/test_dead_actor_reasons.py for every cause on the
simulated mesh)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

import zmesh
from zmesh.exceptions import ActorDiedError
from zmesh.testing import Cluster


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    c.add_node(num_cpus=1, resources={"far": 8})
    zmesh.init(address=c.address, namespace="reasons")
    yield c
    zmesh.shutdown()
    c.shutdown()


@zmesh.remote(num_cpus=0)
class Victim:
    def ping(self) -> int:
        return os.getpid()

    def exit(self, code: int) -> None:
        os._exit(code)


@zmesh.remote(num_cpus=0, resources={"far": 1})
def call_from_far(actor: Any) -> str:
    """A caller on the far node, which never followed the actor before it died."""
    try:
        zmesh.get(actor.ping.remote(), timeout=60)
    except ActorDiedError as exc:
        return str(exc)
    return "answered"


def _dead(how: str) -> Any:
    head = zmesh.get_runtime_context().get_node_id()
    victim = Victim.options(scheduling_strategy=zmesh.util.scheduling_strategies
                            .NodeAffinitySchedulingStrategy(node_id=head, soft=False)).remote()
    zmesh.get(victim.ping.remote(), timeout=30)
    if how == "exit":
        victim.exit.remote(7)
    else:
        zmesh.kill(victim)
    with pytest.raises(ActorDiedError):  # its owner (this driver) heard of the death
        zmesh.get(victim.ping.remote(), timeout=30)
    return victim


def test_a_caller_on_another_node_hears_the_exit_code(cluster: Cluster) -> None:
    text = zmesh.get(call_from_far.remote(_dead("exit")), timeout=60)
    assert "exited with code 7" in text, text


def test_a_caller_on_another_node_hears_of_the_kill(cluster: Cluster) -> None:
    text = zmesh.get(call_from_far.remote(_dead("kill")), timeout=60)
    assert "killed by zmesh.kill()" in text, text
