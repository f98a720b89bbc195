"""Lineage: a task's stored result lost with its node is made again while its owner lives."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

import zmesh
from zmesh.testing import Cluster
from zmesh.util.scheduling_strategies import NodeAffinitySchedulingStrategy

N = (2 << 20) // 8  # 2 MiB: over the inline limit, so the value lives in a node's store


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    zmesh.init(address=c.address)
    yield c
    zmesh.shutdown()
    c.shutdown()


@zmesh.remote
def make(n: int) -> tuple[str, np.ndarray]:
    return zmesh.get_runtime_context().get_node_id(), np.arange(n, dtype=np.int64)


def test_a_result_lost_with_its_node_is_rebuilt_from_its_task(cluster: Cluster) -> None:
    doomed = cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    prefer_doomed = NodeAffinitySchedulingStrategy(node_id=doomed.node_id, soft=True)
    ref = make.options(scheduling_strategy=prefer_doomed).remote(N)
    ready, _ = zmesh.wait([ref], timeout=60)  # done, but never read: its only copy is there
    assert ready == [ref]
    cluster.kill_node(doomed)
    cluster.wait_for_nodes()
    where, arr = zmesh.get(ref, timeout=60)
    assert where != doomed.node_id  # it ran again, elsewhere
    assert arr.shape == (N,) and int(arr[-1]) == N - 1


def test_a_lost_result_of_a_task_without_retries_stays_lost(cluster: Cluster) -> None:
    doomed = cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    prefer_doomed = NodeAffinitySchedulingStrategy(node_id=doomed.node_id, soft=True)
    ref = make.options(scheduling_strategy=prefer_doomed, max_retries=0).remote(N)
    zmesh.wait([ref], timeout=60)
    cluster.kill_node(doomed)
    cluster.wait_for_nodes()
    with pytest.raises(zmesh.exceptions.ObjectLostError):
        zmesh.get(ref, timeout=60)
