"""Nodes of one mesh on one machine move objects by copying each other's store files: a
2-node tcp Cluster, large numpy arrays and small arena objects, both directions; a holder
directory that fails the puller's checks sends the object through the socket instead; a
puller node killed while it copies leaves no pin on the holder."""

from __future__ import annotations

import os
from collections.abc import Iterator

import msgspec
import numpy as np
import pytest
from runtime_fixtures import wait_until

import zmesh
from zmesh.testing import Cluster, ClusterNode
from zmesh.util.scheduling_strategies import NodeAffinitySchedulingStrategy

N = (40 << 20) // 8 + 321  # a 40 MiB array, not a whole number of pages


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    c.add_node(num_cpus=1, resources={"far": 1})
    zmesh.init(address=c.address)
    yield c
    zmesh.shutdown()
    c.shutdown()


def far_node(cluster: Cluster) -> ClusterNode:
    (node,) = [n for n in cluster.list_all_nodes() if "far" in (n.args.get("resources") or {})]
    return node


def on(node: ClusterNode) -> NodeAffinitySchedulingStrategy:
    return NodeAffinitySchedulingStrategy(node_id=node.node_id, soft=False)


def transfer(cluster: Cluster, node: ClusterNode) -> dict[str, int]:
    return {k: int(v) for k, v in cluster.query(node, "transfer").items()}


@zmesh.remote
def checksum(*arrays: np.ndarray) -> list[tuple[int, int]]:
    return [(a.size, int(a.astype(np.int64).sum() % (1 << 61))) for a in arrays]


@zmesh.remote
def make(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 1 << 40, n, dtype=np.int64)


def expected(*arrays: np.ndarray) -> list[tuple[int, int]]:
    return [(a.size, int(a.astype(np.int64).sum() % (1 << 61))) for a in arrays]


def test_a_large_array_reaches_the_other_node_by_a_local_copy(cluster: Cluster) -> None:
    far = far_node(cluster)
    before = transfer(cluster, far)
    arr = np.random.default_rng(1).integers(0, 1 << 40, N, dtype=np.int64)
    ref = zmesh.put(arr)
    assert zmesh.get(checksum.options(scheduling_strategy=on(far)).remote(ref),
                     timeout=120) == expected(arr)
    after = transfer(cluster, far)
    assert after["local_copies"] - before["local_copies"] == 1
    assert after["local_bytes"] - before["local_bytes"] >= arr.nbytes
    assert after["bytes_received"] == before["bytes_received"]  # nothing over the socket
    assert after["local_fallbacks"] == before["local_fallbacks"]


def test_small_objects_in_one_arena_segment_each_arrive_whole(cluster: Cluster) -> None:
    far = far_node(cluster)
    before = transfer(cluster, far)
    arrays = [np.arange(n, dtype=np.int32) * (i + 1)
              for i, n in enumerate([30_000, 50_001, 26_000, 70_000])]  # over the inline limit
    refs = [zmesh.put(a) for a in arrays]
    assert zmesh.get(checksum.options(scheduling_strategy=on(far)).remote(*refs),
                     timeout=120) == expected(*arrays)
    after = transfer(cluster, far)
    assert after["local_copies"] - before["local_copies"] == len(arrays)
    assert after["bytes_received"] == before["bytes_received"]


def test_a_return_made_on_the_other_node_is_copied_to_the_driver(cluster: Cluster) -> None:
    head = cluster.head_node
    assert head is not None
    before = transfer(cluster, head)
    got = zmesh.get(make.options(scheduling_strategy=on(far_node(cluster))).remote(N, 7),
                    timeout=120)
    assert np.array_equal(got, np.random.default_rng(7).integers(0, 1 << 40, N,
                                                                 dtype=np.int64))
    after = transfer(cluster, head)
    assert after["local_copies"] - before["local_copies"] == 1
    assert after["bytes_received"] == before["bytes_received"]


def test_a_holder_directory_others_may_enter_is_refused_and_the_socket_used(
        cluster: Cluster) -> None:
    head, far = cluster.head_node, far_node(cluster)
    assert head is not None
    store_dir = cluster.query(head, "node")["store_dir"]
    before = transfer(cluster, far)
    arr = np.random.default_rng(2).integers(0, 1 << 40, N, dtype=np.int64)
    os.chmod(store_dir, 0o750)  # the puller must not read from a directory others may enter
    try:
        ref = zmesh.put(arr)
        assert zmesh.get(checksum.options(scheduling_strategy=on(far)).remote(ref),
                         timeout=120) == expected(arr)
    finally:
        os.chmod(store_dir, 0o700)
    after = transfer(cluster, far)
    assert after["local_fallbacks"] - before["local_fallbacks"] == 1
    assert after["local_copies"] == before["local_copies"]
    assert after["bytes_received"] - before["bytes_received"] >= arr.nbytes


def local_pins(cluster: Cluster, node: ClusterNode) -> list[str]:
    objects = cluster.query(node, "memory")["objects"]
    return [p for o in objects for p in o["pinned_by"] if p.startswith("local:")]


def test_a_puller_node_killed_with_a_copy_session_open_leaves_no_pin_on_the_holder(
        cluster: Cluster) -> None:
    """The puller drops its PullDone messages (chaos), so the holder keeps the pin it took
    for the copy, as it does while a copy is under way; then the puller is SIGKILLed. The
    pin must go when membership declares it dead, well before the 60 s idle timeout."""
    head = cluster.head_node
    assert head is not None
    doomed = cluster.add_node(num_cpus=1, resources={"doomed": 1})
    cluster._querier_().query(doomed.address, "chaos", msgspec.msgpack.encode(
        {"drop": 1.0, "kinds": ["PullDone"]}), timeout=10)
    arr = np.arange(N, dtype=np.int64)
    ref = zmesh.put(arr)
    assert zmesh.get(checksum.options(scheduling_strategy=on(doomed)).remote(ref),
                     timeout=120) == expected(arr)
    assert local_pins(cluster, head), "the holder should still pin the object for the copy"
    cluster.kill_node(doomed)
    assert wait_until(lambda: not local_pins(cluster, head), timeout=30), \
        local_pins(cluster, head)
    assert transfer(cluster, head)["serving_sessions"] == 0
    # and the object is whole for the next reader
    assert zmesh.get(checksum.options(scheduling_strategy=on(far_node(cluster))).remote(ref),
                     timeout=120) == expected(arr)
