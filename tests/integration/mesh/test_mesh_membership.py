"""Membership on real processes: five nodes on this machine, crashes, pauses, tcp drivers."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

import zmesh
from zmesh.testing import Cluster

CRASH_DETECTION_LIMIT_S = 3.0


@pytest.fixture
def five() -> Iterator[Cluster]:
    c = Cluster(initialize_head=True)
    for _ in range(4):
        c.add_node(num_cpus=1, wait=False)
    c.wait_for_nodes()
    yield c
    c.shutdown()


def test_a_sigkilled_node_is_known_dead_by_every_other_node_within_3s(five: Cluster) -> None:
    victim = five.list_all_nodes()[2]
    others = [n for n in five.list_all_nodes() if n is not victim]
    five.kill_node(victim)
    killed_at = time.monotonic()
    known: dict[str, float] = {}
    while len(known) < len(others) and time.monotonic() - killed_at < 10:
        for node in others:
            if node.node_id not in known and victim.node_id not in five.live_view(node):
                known[node.node_id] = time.monotonic() - killed_at
        time.sleep(0.02)
    assert len(known) == len(others), f"not every node noticed the crash: {known}"
    assert max(known.values()) < CRASH_DETECTION_LIMIT_S, known
    states = {r["NodeID"]: r["State"] for r in five.query(others[0], "nodes")}
    assert states[victim.node_id] == "dead"


def test_a_paused_node_that_resumes_within_the_suspicion_window_stays_a_member(
        five: Cluster) -> None:
    node = five.list_all_nodes()[1]
    five.pause_node(node)
    time.sleep(0.3)  # a pause shorter than the suspicion window (0.8 s at 5 members)
    five.resume_node(node)
    five.wait_for_nodes(timeout=10)
    for other in five.list_all_nodes():
        assert node.node_id in five.live_view(other)


def test_a_driver_connected_over_tcp_runs_spread_tasks_on_several_nodes(five: Cluster) -> None:
    zmesh.init(address=f"tcp://{five.address}")

    @zmesh.remote(scheduling_strategy="SPREAD")
    def where() -> str:
        time.sleep(0.2)
        return zmesh.get_runtime_context().get_node_id()

    ids = zmesh.get([where.remote() for _ in range(10)], timeout=60)
    # SPREAD spreads the owner's leases (a few at a time), not each task.
    assert len(set(ids)) >= 3
    assert set(ids) <= {n.node_id for n in five.list_all_nodes()}
    zmesh.shutdown()
