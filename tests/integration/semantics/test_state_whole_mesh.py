"""`zmesh.util.state.list_actors()` / `get_actor()` (and Ray-compat's `ray.util.state`) see
every actor of the mesh, not only those the caller's node knows: an actor created by a task
on another node, which the driver's node never heard of, is listed with its state."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from runtime_fixtures import wait_until

import zmesh
from zmesh.testing import Cluster
from zmesh.util import state
from zmesh.util.scheduling_strategies import NodeAffinitySchedulingStrategy


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    c.add_node(num_cpus=2)
    zmesh.init(address=c.address)
    yield c
    zmesh.shutdown()
    c.shutdown()


@zmesh.remote(num_cpus=0)
class FarAway:
    def ping(self) -> str:
        return "pong"


def test_actors_of_other_nodes_are_listed(cluster: Cluster) -> None:
    head, far = cluster.list_all_nodes()[0], cluster.list_all_nodes()[-1]
    on_far = NodeAffinitySchedulingStrategy(node_id=far.node_id, soft=False)

    @zmesh.remote(num_cpus=0)
    def make_there() -> str:
        a = FarAway.options(name="far-away", lifetime="detached").remote()
        assert zmesh.get(a.ping.remote(), timeout=60) == "pong"
        return str(a._actor_id.hex())

    actor_id = zmesh.get(make_there.options(scheduling_strategy=on_far).remote(), timeout=120)
    assert actor_id not in cluster.query(head, "actors")  # the driver's node never heard of it
    assert wait_until(lambda: any(r["actor_id"] == actor_id for r in state.list_actors()),
                      timeout=30)
    row = state.get_actor(actor_id)
    assert row is not None
    assert (row["class_name"], row["state"], row["name"]) == ("FarAway", "ALIVE", "far-away")
    assert state.get_actor("00" * 16) is None
    # the cluster's shutdown ends the detached actor
