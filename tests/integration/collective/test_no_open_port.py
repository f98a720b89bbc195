"""Forming a collective group and moving tensors over the tensor transport open no
rendezvous port: the torch Store is the mesh's KV (MeshStore), reached over the mesh's
authenticated links. The only listening sockets that appear are gloo's own (one per process
group, for its peer-to-peer data connections), counted here against a plain gloo group. A
tensor transport pair over gloo is four groups on one gloo device of its own."""

from __future__ import annotations

import datetime
import os
import sys
import threading

import cloudpickle
import pytest

import zmesh
from zmesh.util import kv

torch = pytest.importorskip("torch")
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import tests


def _listening() -> set[str]:
    """local addresses of this process's listening TCP sockets (from /proc, no psutil)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            inodes.add(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass
    found = set()
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                cols = line.split()
                if cols[3] == "0A" and f"socket:[{cols[9]}]" in inodes:  # 0A: LISTEN
                    found.add(cols[1])
    return found


def _forbid_tcpstore() -> None:
    import torch.distributed as dist

    class NoTCPStore:
        def __init__(self, *a: object, **k: object) -> None:
            raise AssertionError("a TCPStore was opened")

    dist.TCPStore = NoTCPStore  # type: ignore[misc,assignment]


def _gloo_listeners_per_group() -> int:
    """How many listening sockets one plain gloo group opens in this process."""
    import torch.distributed as dist

    before = _listening()
    pg = dist.ProcessGroupGloo(dist.HashStore(), 0, 1, datetime.timedelta(seconds=30))
    opened = len(_listening() - before)
    del pg
    return opened


@zmesh.remote
class Member:
    def __init__(self, rank: int) -> None:
        self.rank = rank
        _forbid_tcpstore()
        self.gloo_cost = _gloo_listeners_per_group()
        self.before = _listening()

    def allreduce(self, name: str) -> tuple[list[float], int, int]:
        import zmesh.collective as col

        t = torch.full((4,), float(self.rank + 1))
        col.allreduce(t, name)  # joins the declared group first
        return t.tolist(), len(_listening() - self.before), self.gloo_cost


@zmesh.remote
class Producer:
    def __init__(self) -> None:
        _forbid_tcpstore()
        self.gloo_cost = _gloo_listeners_per_group()
        self.before = _listening()

    @zmesh.method(tensor_transport="gloo")
    def weights(self):
        return torch.arange(1000, dtype=torch.float32)

    def opened(self) -> tuple[int, int]:
        return len(_listening() - self.before), self.gloo_cost


@zmesh.remote
class Consumer:
    def __init__(self) -> None:
        _forbid_tcpstore()
        self.gloo_cost = _gloo_listeners_per_group()
        self.before = _listening()

    def total(self, refs: list) -> tuple[float, float, int, int]:
        first = float(zmesh.get(refs[0]).sum())
        second = float(zmesh.get(refs[0]).sum())  # the warm pair again
        return first, second, len(_listening() - self.before), self.gloo_cost


def test_a_collective_group_opens_no_port_but_gloo_s(ray):
    import zmesh.collective as col

    members = [Member.remote(r) for r in range(2)]
    col.create_collective_group(members, 2, [0, 1], backend="gloo", group_name="noport")
    for values, opened, gloo_cost in zmesh.get([m.allreduce.remote("noport") for m in members],
                                               timeout=180):
        assert values == [3.0] * 4
        assert gloo_cost >= 1 and opened <= gloo_cost  # a TCPStore would add one on rank 0


def test_the_tensor_transport_opens_no_port_but_gloo_s(ray):
    producer, consumer = Producer.remote(), Consumer.remote()
    ref = producer.weights.remote()
    first, second, opened, gloo_cost = zmesh.get(consumer.total.remote([ref]), timeout=180)
    assert first == second == float(sum(range(1000)))
    assert gloo_cost >= 1 and opened <= 4 * gloo_cost  # at most one per group
    opened, gloo_cost = zmesh.get(producer.opened.remote(), timeout=60)
    assert opened <= 4 * gloo_cost  # the old inbox TCPStore would add one


def test_the_mesh_store_is_a_torch_store_over_the_kv(ray):
    from zmesh.collective.store import MeshStore

    store = MeshStore("test/meshstore/", 30.0)
    store.set("a", b"1")
    assert store.get("a") == b"1" and kv.kv_get("test/meshstore/a") == b"1"
    assert store.check(["a"]) and not store.check(["a", "b"])
    results: list[int] = []

    def adder() -> None:
        for _ in range(5):
            results.append(store.add("n", 2))

    threads = [threading.Thread(target=adder) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == list(range(2, 31, 2))  # every add counted once, atomically
    assert store.get("n") == b"30"
    assert store.compare_set("c", b"", b"x") == b"x"  # absent + empty expected: set
    assert store.compare_set("c", b"y", b"z") == b"x"  # mismatch: unchanged
    assert store.compare_set("c", b"x", b"z") == b"z"
    assert store.num_keys() == 3
    assert store.delete_key("a") and not store.check(["a"])
    store.set_timeout(datetime.timedelta(seconds=0.2))
    with pytest.raises(TimeoutError, match="test/meshstore/missing"):
        store.get("missing")
    with pytest.raises(zmesh.exceptions.ZmeshError, match="not an int"):
        store.add("c", 1)
    store.clear()
    assert kv.kv_list("test/meshstore/") == []
