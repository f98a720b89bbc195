"""Placement groups across the nodes of a mesh: reserved atomically, work follows its bundle.

One cluster of three nodes with 2 CPUs each (one of them with 2 GPUs) and one driver serve
the module; each test removes its groups, so every test starts from a free cluster.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from runtime_fixtures import wait_until

import zmesh
from zmesh.exceptions import RayActorError
from zmesh.testing import Cluster
from zmesh.util import placement_group, placement_group_table, remove_placement_group
from zmesh.util.scheduling_strategies import PlacementGroupSchedulingStrategy


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    c.add_node(num_cpus=2)
    c.add_node(num_cpus=2, num_gpus=2)
    zmesh.init(address=c.address)
    yield c
    c.shutdown()


@zmesh.remote(num_cpus=0)
def where() -> str:
    return zmesh.get_runtime_context().get_node_id()


@zmesh.remote(num_cpus=0)
class Probe:
    def node_and_gpus(self) -> tuple[str, str]:
        return (zmesh.get_runtime_context().get_node_id(),
                os.environ.get("CUDA_VISIBLE_DEVICES", ""))


def in_bundle(pg: object, index: int) -> PlacementGroupSchedulingStrategy:
    return PlacementGroupSchedulingStrategy(placement_group=pg,
                                            placement_group_bundle_index=index)


def free_cpus_everywhere(cluster: Cluster) -> bool:
    """Every node reports all its CPUs free (no bundle or lease holds any)."""
    for node in cluster.list_all_nodes():
        rows = {r["NodeID"]: r for r in cluster.query(node, "nodes")}
        me = rows[node.node_id]
        if me["Available"].get("CPU", 0.0) != me["Resources"]["CPU"]:
            return False
    return True


def test_strict_spread_of_three_lands_on_three_nodes_and_work_follows_its_bundle(
        cluster: Cluster) -> None:
    pg = placement_group([{"CPU": 1}] * 3, strategy="STRICT_SPREAD")
    assert pg.wait(30)
    table = placement_group_table(pg)
    assert table["state"] == "CREATED"
    layout = table["bundles_to_node_id"]
    assert set(layout.values()) == {n.node_id for n in cluster.list_all_nodes()}
    got = zmesh.get([where.options(scheduling_strategy=in_bundle(pg, i)).remote()
                     for i in range(3)], timeout=30)
    assert got == [layout[i] for i in range(3)]
    remove_placement_group(pg)
    assert wait_until(lambda: free_cpus_everywhere(cluster), timeout=10)


def test_strict_pack_puts_every_bundle_on_one_node(cluster: Cluster) -> None:
    pg = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="STRICT_PACK")
    assert pg.wait(30)
    assert len(set(placement_group_table(pg)["bundles_to_node_id"].values())) == 1
    remove_placement_group(pg)
    assert wait_until(lambda: free_cpus_everywhere(cluster), timeout=10)


def test_pack_too_big_for_one_node_spans_nodes(cluster: Cluster) -> None:
    pg = placement_group([{"CPU": 2}, {"CPU": 2}], strategy="PACK")
    assert pg.wait(30)
    assert len(set(placement_group_table(pg)["bundles_to_node_id"].values())) == 2
    remove_placement_group(pg)
    assert wait_until(lambda: free_cpus_everywhere(cluster), timeout=10)


def test_spread_uses_distinct_nodes_when_it_can(cluster: Cluster) -> None:
    pg = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="SPREAD")
    assert pg.wait(30)
    assert len(set(placement_group_table(pg)["bundles_to_node_id"].values())) == 2
    remove_placement_group(pg)
    assert wait_until(lambda: free_cpus_everywhere(cluster), timeout=10)


def test_an_infeasible_group_reserves_nothing_and_says_why(cluster: Cluster) -> None:
    pg = placement_group([{"CPU": 2}] * 3 + [{"CPU": 1}], strategy="STRICT_SPREAD")
    ready, _ = zmesh.wait([pg.ready()], timeout=1.0)
    assert ready == []
    table = placement_group_table(pg)
    assert table["state"] == "PENDING"
    assert "STRICT_SPREAD" in table["reason"] or "node" in table["reason"]
    assert free_cpus_everywhere(cluster)  # all or none: no node holds part of it
    remove_placement_group(pg)


def test_strict_spread_of_four_waits_for_a_fourth_node_then_becomes_ready(
        cluster: Cluster) -> None:
    pg = placement_group([{"CPU": 1}] * 4, strategy="STRICT_SPREAD")
    ready, _ = zmesh.wait([pg.ready()], timeout=1.0)
    assert ready == []
    assert placement_group_table(pg)["state"] == "PENDING"
    node = cluster.add_node(num_cpus=1)
    try:
        assert pg.wait(30)
        layout = placement_group_table(pg)["bundles_to_node_id"]
        assert node.node_id in layout.values() and len(set(layout.values())) == 4
        remove_placement_group(pg)
        assert wait_until(lambda: free_cpus_everywhere(cluster), timeout=10)
    finally:
        cluster.remove_node(node)
        cluster.wait_for_nodes()


def test_gpu_bundles_give_actors_distinct_gpu_ids(cluster: Cluster) -> None:
    pg = placement_group([{"GPU": 1}, {"GPU": 1}], strategy="STRICT_PACK")
    assert pg.wait(30)
    gpu_node = next(n.node_id for n in cluster.list_all_nodes() if n.args.get("num_gpus"))
    actors = [Probe.options(num_gpus=1, scheduling_strategy=in_bundle(pg, i)).remote()
              for i in range(2)]
    got = zmesh.get([a.node_and_gpus.remote() for a in actors], timeout=30)
    assert {node for node, _ in got} == {gpu_node}
    assert sorted(gpus for _, gpus in got) == ["0", "1"]
    remove_placement_group(pg)


def test_removing_a_group_stops_its_actor_on_another_node_and_frees_its_bundles(
        cluster: Cluster) -> None:
    pg = placement_group([{"CPU": 1}] * 3, strategy="STRICT_SPREAD")
    assert pg.wait(30)
    layout = placement_group_table(pg)["bundles_to_node_id"]
    remote = next(i for i, n in layout.items() if n != cluster.head_node.node_id)  # type: ignore[union-attr]
    actor = Probe.options(num_cpus=1, scheduling_strategy=in_bundle(pg, remote)).remote()
    assert zmesh.get(actor.node_and_gpus.remote(), timeout=30)[0] == layout[remote]
    remove_placement_group(pg)

    def actor_is_dead() -> bool:  # removal is asynchronous, as in Ray
        try:
            zmesh.get(actor.node_and_gpus.remote(), timeout=30)
        except RayActorError:
            return True
        return False

    assert wait_until(actor_is_dead, timeout=10)
    assert wait_until(lambda: free_cpus_everywhere(cluster), timeout=10)
