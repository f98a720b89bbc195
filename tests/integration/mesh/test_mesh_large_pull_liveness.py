"""A node busy moving a large object stays a member: 1 GiB pulls over tcp + CURVE between
two Cluster nodes (same-host copies off) on a loaded machine (busy-looping processes, three
per core) declare nobody dead. A soak (--slow): it loads every core for ~a minute, moves
2 GiB through CURVE and needs ~5 GiB of /dev/shm."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import zmesh
from zmesh.testing import Cluster
from zmesh.util.scheduling_strategies import NodeAffinitySchedulingStrategy

MiB = 1 << 20
SIZE = 1024 * MiB


@zmesh.remote
def make(nbytes: int) -> Any:
    a = np.empty(nbytes, dtype=np.uint8)
    a[:] = 5
    return a


@pytest.fixture
def pair(monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    monkeypatch.setenv("ZMESH_LOCAL_COPY", "0")  # every byte through the socket
    store = 2 * SIZE + 256 * MiB
    c = Cluster(initialize_head=True,
                head_node_args={"num_cpus": 1, "object_store_memory": store})
    c.add_node(num_cpus=1, object_store_memory=store)
    c.wait_for_nodes()
    zmesh.init(address=c.address)
    yield c
    zmesh.shutdown()
    c.shutdown()


@pytest.fixture
def load() -> Iterator[None]:
    """Three busy-looping processes per core (stop21's sitting ran at load ~9 on 2 cores)."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(3 * (os.cpu_count() or 1))]
    yield
    for hog in hogs:
        hog.kill()
        hog.wait()


@pytest.mark.soak
@pytest.mark.timeout(900)
def test_nodes_busy_with_a_1gib_pull_are_not_declared_dead(pair: Cluster, load: None) -> None:
    # Before: the puller prefaulted and reserved the whole 1 GiB region in one turn of its
    # loop (1.8 s at load ~1), the holder did the same for its worker's allocation, and
    # the other node declared it dead mid-pull (stop21: "died after sending 0 of ...").
    head, far = pair.list_all_nodes()
    on_far = NodeAffinitySchedulingStrategy(node_id=far.node_id, soft=False)
    for _ in range(2):
        ref = make.options(scheduling_strategy=on_far).remote(SIZE)
        zmesh.wait([ref], timeout=300, fetch_local=False)
        got = zmesh.get(ref, timeout=300)
        assert got.nbytes == SIZE and got[0] == 5 and got[-1] == 5
        del got, ref
    for node in (head, far):
        events = pair.query(node, "metrics")["membership_events"]
        assert not events.get("dead") and not events.get("left"), (node, events)
