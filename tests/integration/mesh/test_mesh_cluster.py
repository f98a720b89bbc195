"""A mesh of nodes on this machine (zmesh.testing.Cluster): forwarding, strategies, failures.

One cluster (head + two nodes with distinct custom resources) and one driver serve the
module; tests that kill nodes add their own node first.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest

import zmesh
from zmesh.testing import Cluster
from zmesh.util.scheduling_strategies import NodeAffinitySchedulingStrategy


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    c.add_node(num_cpus=1, resources={"red": 2})
    c.add_node(num_cpus=1, resources={"blue": 2}, labels={"zone": "b"})
    zmesh.init(address=c.address)
    yield c
    c.shutdown()


def node_of(cluster: Cluster, resource: str) -> str:
    for node in cluster.list_all_nodes():
        if resource in (node.args.get("resources") or {}):
            return node.node_id
    raise LookupError(resource)


@zmesh.remote
def where() -> str:
    return zmesh.get_runtime_context().get_node_id()


def test_add_node_reports_the_node_id_tasks_see_there(cluster: Cluster) -> None:
    ids = zmesh.get([where.options(resources={"red": 1}).remote() for _ in range(3)], timeout=30)
    assert set(ids) == {node_of(cluster, "red")}


def test_nodes_lists_every_member_alive_with_its_resources(cluster: Cluster) -> None:
    rows = {r["NodeID"]: r for r in zmesh.nodes()}
    assert set(rows) == {n.node_id for n in cluster.list_all_nodes()}
    assert all(r["Alive"] for r in rows.values())
    assert rows[node_of(cluster, "blue")]["Resources"]["blue"] == 2.0
    assert rows[node_of(cluster, "blue")]["Labels"] == {"zone": "b"}
    assert zmesh.cluster_resources()["CPU"] == 3.0


def test_a_task_that_does_not_fit_locally_is_forwarded_to_the_node_that_fits(
        cluster: Cluster) -> None:
    assert zmesh.get(where.options(resources={"blue": 1}).remote(), timeout=30) == \
        node_of(cluster, "blue")


def test_spread_tasks_run_on_several_nodes(cluster: Cluster) -> None:
    @zmesh.remote(scheduling_strategy="SPREAD")
    def slow_where() -> str:
        time.sleep(0.3)  # keep each CPU busy so the burst must spread
        return zmesh.get_runtime_context().get_node_id()

    # SPREAD picks among nodes with room now: leases that earlier tests' owners still hold
    # idle (they are kept a while for reuse) must have gone back first. (Failed in 1 of 4
    # CI runs under load without this wait: all six ran on the driver's node.)
    from runtime_fixtures import wait_until

    total = zmesh.cluster_resources()["CPU"]
    assert wait_until(lambda: zmesh.available_resources().get("CPU") == total, timeout=60)
    ids = zmesh.get([slow_where.remote() for _ in range(6)], timeout=60)
    assert len(set(ids)) >= 2
    assert set(ids) <= {n.node_id for n in cluster.list_all_nodes()}


def test_hard_node_affinity_runs_on_that_node(cluster: Cluster) -> None:
    target = node_of(cluster, "red")
    strategy = NodeAffinitySchedulingStrategy(node_id=target, soft=False)
    ids = zmesh.get([where.options(scheduling_strategy=strategy).remote() for _ in range(3)],
                    timeout=30)
    assert set(ids) == {target}


def test_an_actor_that_needs_another_nodes_resource_starts_there_and_is_callable(
        cluster: Cluster) -> None:
    @zmesh.remote(resources={"red": 1})
    class Counter:
        def __init__(self) -> None:
            self.n = 0

        def incr(self) -> tuple[int, str]:
            self.n += 1
            return self.n, zmesh.get_runtime_context().get_node_id()

    c = Counter.remote()
    got = zmesh.get([c.incr.remote() for _ in range(3)], timeout=30)
    assert got == [(i, node_of(cluster, "red")) for i in (1, 2, 3)]
    zmesh.kill(c)


def test_a_detached_named_actor_on_another_node_is_found_by_name(cluster: Cluster) -> None:
    @zmesh.remote(resources={"blue": 1})
    class Registry:
        def ping(self) -> str:
            return "pong from " + zmesh.get_runtime_context().get_node_id()

    Registry.options(name="registry", lifetime="detached").remote()
    handle = zmesh.get_actor("registry")
    assert zmesh.get(handle.ping.remote(), timeout=30) == "pong from " + node_of(cluster, "blue")
    zmesh.kill(handle)


def test_a_task_no_node_can_hold_waits_and_runs_when_a_fitting_node_joins(
        cluster: Cluster, capfd: pytest.CaptureFixture[str]) -> None:
    ref = where.options(resources={"green": 1}).remote()
    ready, _ = zmesh.wait([ref], timeout=1.0)
    assert ready == []
    assert "green" in capfd.readouterr().err  # the driver was told what is missing
    node = cluster.add_node(num_cpus=1, resources={"green": 1})
    try:
        assert zmesh.get(ref, timeout=30) == node.node_id
    finally:
        cluster.remove_node(node)


def test_a_graceful_leave_is_known_as_left(cluster: Cluster) -> None:
    node = cluster.add_node(num_cpus=1)
    cluster.remove_node(node)
    states = {r["NodeID"]: r["State"] for r in zmesh.nodes()}
    assert states.get(node.node_id) == "left"


def test_tasks_on_a_killed_node_are_retried_elsewhere(cluster: Cluster) -> None:
    node = cluster.add_node(num_cpus=1, resources={"doomed": 1, "safe": 1})
    keeper = cluster.add_node(num_cpus=1, resources={"safe": 1})
    try:
        @zmesh.remote(resources={"safe": 1}, max_retries=3)
        def pid_then_wait(marker: str) -> str:
            if zmesh.get_runtime_context().get_node_id() == marker:
                time.sleep(60)  # held here until the node is killed
            return zmesh.get_runtime_context().get_node_id()

        strategy = NodeAffinitySchedulingStrategy(node_id=node.node_id, soft=True)
        ref = pid_then_wait.options(scheduling_strategy=strategy).remote(node.node_id)
        ready, _ = zmesh.wait([ref], timeout=1.0)
        assert ready == []
        cluster.kill_node(node)
        assert zmesh.get(ref, timeout=30) == keeper.node_id
    finally:
        cluster.remove_node(keeper)


def test_an_actor_whose_node_is_killed_restarts_on_another_node(cluster: Cluster) -> None:
    node = cluster.add_node(num_cpus=1, resources={"home": 1, "purple": 1})
    spare = cluster.add_node(num_cpus=1, resources={"purple": 1})
    try:
        @zmesh.remote(resources={"purple": 1}, max_restarts=1)
        class Where:
            def node(self) -> str:
                return zmesh.get_runtime_context().get_node_id()

        strategy = NodeAffinitySchedulingStrategy(node_id=node.node_id, soft=True)
        w = Where.options(scheduling_strategy=strategy).remote()
        assert zmesh.get(w.node.remote(), timeout=30) == node.node_id
        cluster.kill_node(node)
        deadline = time.monotonic() + 30
        while True:
            try:
                assert zmesh.get(w.node.remote(), timeout=30) == spare.node_id
                break
            except zmesh.exceptions.RayActorError:
                if time.monotonic() > deadline:  # calls in flight at the crash may fail
                    raise
    finally:
        cluster.remove_node(spare)


def test_an_actor_without_restarts_fails_callers_naming_the_dead_node(cluster: Cluster) -> None:
    node = cluster.add_node(num_cpus=1, resources={"lonely": 1})

    @zmesh.remote(resources={"lonely": 1})
    class A:
        def ping(self) -> int:
            return os.getpid()

    a = A.remote()
    zmesh.get(a.ping.remote(), timeout=30)
    cluster.kill_node(node)
    with pytest.raises(zmesh.exceptions.RayActorError, match=node.node_id):
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            zmesh.get(a.ping.remote(), timeout=20)
