"""Object pulls between two nodes' stores over real sockets: a child process holds the
primary copies, this process pulls them (its loop on a thread)."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import pytest
from runtime_fixtures import wait_until
from transfer_harness import MiB, PeerProcess, TransferNode, digest, pattern

from zmesh.errors import ObjectLostError, ObjectStoreFullError
from zmesh.protocol import codec
from zmesh.protocol.messages.transfer import Chunk, ChunkRequest, PullFailed
from zmesh.store.arena import RESERVE_PIECE
from zmesh.transports import open_endpoint

STORE_ROOT = "/dev/shm" if os.path.isdir("/dev/shm") else None
FAST_FAILURE = {"stall_timeout": 0.4, "retries": 1}


@pytest.fixture
def scratch() -> Iterator[str]:
    """A private directory for store dirs and ipc sockets, removed afterwards."""
    path = tempfile.mkdtemp(prefix="zt-", dir=STORE_ROOT)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def address_for(scheme: str, scratch: str, name: str) -> str:
    return "tcp://127.0.0.1:0" if scheme == "tcp" else f"ipc://{scratch}/{name}.sock"


@pytest.fixture(params=["tcp", "ipc"])
def scheme(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def peer(scheme: str, scratch: str) -> Iterator[PeerProcess]:
    """The source node, in a child process."""
    p = PeerProcess(address_for(scheme, scratch, "peer"), f"{scratch}/peer-store", 512 * MiB)
    yield p
    p.close()


@pytest.fixture
def local(scheme: str, scratch: str) -> Iterator[TransferNode]:
    """The pulling node, with its loop on a thread of this process."""
    node = TransferNode(address_for(scheme, scratch, "local"), f"{scratch}/local-store",
                        256 * MiB, **FAST_FAILURE)
    yield node
    node.close()


def test_a_pulled_object_has_the_same_bytes_and_is_a_secondary_copy(
    peer: PeerProcess, local: TransferNode
) -> None:
    size = 64 * MiB + 12345  # a ragged last chunk
    oid, expected = peer.put(size, seed=1)
    assert local.pull(oid, peer.address, size).result(30) == oid
    assert local.digest_of(oid) == expected
    assert local.call(local.store.is_sealed, oid)
    assert local.call(lambda: local.store._entries[oid].secondary)
    state = local.state()
    assert state["bytes_received"] == size and state["active_pulls"] == 0
    # The holder drops its pin once the transfer is over and zmq has sent every slice.
    assert wait_until(lambda: peer.state()["num_pinned"] == 0, timeout=5)
    assert peer.state()["serving_sessions"] == 0


def test_concurrent_pulls_of_one_object_make_one_transfer(
    peer: PeerProcess, local: TransferNode
) -> None:
    size = 24 * MiB
    oid, expected = peer.put(size, seed=2)
    futures = local.call(lambda: [local.pull(oid, peer.address, size) for _ in range(3)])
    assert [f.result(30) for f in futures] == [oid] * 3
    state = local.state()
    assert (state["transfers_started"], state["pulls_merged"]) == (1, 2)
    assert state["bytes_received"] == size
    assert peer.state()["bytes_served"] == size
    assert local.digest_of(oid) == expected


def test_pulling_an_object_the_source_does_not_hold_raises_object_lost(
    peer: PeerProcess, local: TransferNode
) -> None:
    with pytest.raises(ObjectLostError, match="is not in this node's object store"):
        local.pull(b"no-such-object", peer.address, 1000).result(10)
    assert local.state()["num_objects"] == 0  # the region reserved for it was given back


def test_a_source_killed_mid_pull_fails_the_pull_clearly_and_leaves_no_partial_copy(
    scheme: str, scratch: str, local: TransferNode
) -> None:
    peer = PeerProcess(address_for(scheme, scratch, "doomed"), f"{scratch}/doomed-store",
                       256 * MiB)
    try:
        size = 64 * MiB
        oid, _ = peer.put(size, seed=3)
        # With `window` chunks in flight, request window+3 leaves only once the puller has 3
        # chunks; the source is SIGKILLed when it arrives.
        chunk, window = local.transfer.manager.chunk_size, local.transfer.manager.window
        assert size >= (window + 4) * chunk
        peer.command("die-after", window + 3)
        fut = local.pull(oid, peer.address, size)
        with pytest.raises(ObjectLostError, match=r"stopped answering for 0.4 s \(1 retries\) "
                                                  r"after \d+ of 67108864 bytes") as err:
            fut.result(20)
        got = int(re.search(r"after (\d+) of", str(err.value)).group(1))  # type: ignore[union-attr]
        assert 3 * chunk <= got < size
        assert peer.proc.wait(5) == -9
    finally:
        peer.close()
    assert not local.call(local.store.contains, oid)


def test_a_pull_moves_on_to_the_next_source_when_the_first_is_silent(
    peer: PeerProcess, local: TransferNode
) -> None:
    size = 10 * MiB
    oid, expected = peer.put(size, seed=4)
    silent = "tcp://127.0.0.1:9" if peer.address.startswith("tcp") else \
        peer.address + ".nobody"
    started = time.monotonic()
    assert local.pull(oid, [silent, peer.address], size).result(20) == oid
    assert local.digest_of(oid) == expected
    assert time.monotonic() - started < 10


def test_freeing_the_primary_frees_the_secondary_copies(
    peer: PeerProcess, local: TransferNode
) -> None:
    size = 9 * MiB
    oid, _ = peer.put(size, seed=5)
    local.pull(oid, peer.address, size).result(30)
    assert local.call(local.store.contains, oid)
    peer.command("free", oid.hex())
    assert wait_until(lambda: not local.call(local.store.contains, oid), timeout=5)
    assert peer.state()["num_objects"] == 0


def test_a_pull_into_a_full_store_fails_with_store_full(peer: PeerProcess, scratch: str) -> None:
    tiny = TransferNode("tcp://127.0.0.1:0", f"{scratch}/tiny-store", 4 * MiB)
    try:
        oid, _ = peer.put(8 * MiB, seed=6)
        with pytest.raises(ObjectStoreFullError, match="cannot fit object"):
            tiny.pull(oid, peer.address, 8 * MiB).result(10)
        assert tiny.state()["chunks_received"] == 0
    finally:
        tiny.close()


def test_a_pull_of_an_object_already_here_completes_at_once(local: TransferNode) -> None:
    oid = local.put(pattern(3 * MiB, seed=7))
    assert local.pull(oid, "tcp://127.0.0.1:9", 3 * MiB).result(5) == oid
    assert local.state()["transfers_started"] == 0


def test_a_source_reported_dead_fails_its_pulls_at_once(scratch: str) -> None:
    """Membership, not a timeout, says the source died: the pull fails without waiting."""
    slow = {"stall_timeout": 60.0, "retries": 0}
    a = TransferNode("tcp://127.0.0.1:0", f"{scratch}/a-store", 64 * MiB, **slow)
    b = TransferNode("tcp://127.0.0.1:0", f"{scratch}/b-store", 64 * MiB, **slow)
    try:
        a_address = a.address
        oid = a.put(pattern(20 * MiB, seed=8))
        a.close()  # gone without a word
        fut = b.pull(oid, a_address, 20 * MiB)
        b.call(b.transfer.peer_died, a_address)
        with pytest.raises(ObjectLostError, match=f"{a_address} died after sending 0 of"):
            fut.result(5)
    finally:
        a.close()
        b.close()


def test_a_second_node_can_pull_from_a_secondary_and_frees_cascade(
    scratch: str
) -> None:
    nodes = [TransferNode("tcp://127.0.0.1:0", f"{scratch}/n{i}", 64 * MiB) for i in range(3)]
    a, b, c = nodes
    try:
        data = pattern(17 * MiB, seed=9)
        oid = a.put(data)
        b.pull(oid, a.address, len(data)).result(10)
        c.pull(oid, b.address, len(data)).result(10)  # from the secondary copy
        assert c.digest_of(oid) == digest(data)
        assert a.call(a.transfer.holders, oid) == {b.address}
        a.call(a.transfer.free, [oid])
        assert wait_until(lambda: not any(n.call(n.store.contains, oid) for n in nodes), 5)
    finally:
        for n in nodes:
            n.close()


def test_the_holder_answers_a_bad_request_and_releases_an_abandoned_session(
    scratch: str
) -> None:
    """A puller that vanishes without PullDone: its session expires and the pin goes."""
    holder = TransferNode("tcp://127.0.0.1:0", f"{scratch}/h-store", 64 * MiB)
    puller = open_endpoint("tcp://127.0.0.1:0")
    try:
        oid = holder.put(pattern(3 * MiB, seed=10))
        puller.send(holder.address, [codec.encode(ChunkRequest(
            transfer_id=1, object_id=oid, offset=0, length=MiB))])
        reply = puller.recv(10)
        assert reply is not None
        msg, bufs = codec.unpack(reply[1])
        assert isinstance(msg, Chunk) and (msg.offset, msg.size) == (0, 3 * MiB)
        assert bytes(bufs[0]) == pattern(3 * MiB, seed=10)[:MiB]
        del reply, bufs  # the holder's pin lasts while any slice of its view is alive
        puller.send(holder.address, [codec.encode(ChunkRequest(
            transfer_id=1, object_id=oid, offset=2 * MiB, length=2 * MiB))])
        reply = puller.recv(10)
        assert reply is not None
        refusal, _ = codec.unpack(reply[1])
        assert isinstance(refusal, PullFailed) and not refusal.lost
        assert "bad chunk request: 2097152 bytes at offset 2097152" in refusal.reason
        assert holder.state()["num_pinned"] == 1
        holder.call(holder.transfer.server.expire, time.monotonic() + 3600)
        assert wait_until(lambda: holder.state()["num_pinned"] == 0, timeout=5)
    finally:
        puller.close()
        holder.close()


def _record_prefaults(node: TransferNode) -> list[int]:
    """Spy on `node`'s mapper: the byte count of every prefault it makes from now on."""
    sizes: list[int] = []
    populate = node.mapper._populate

    def recording(m: Any, offset: int, size: int) -> None:
        sizes.append(size)
        populate(m, offset, size)

    node.mapper._can_populate = True  # a kernel without it would stop it at the first call
    node.mapper._populate = recording  # type: ignore[method-assign]
    return sizes


def test_no_step_of_a_pull_does_work_in_proportion_to_the_whole_object(
        scratch: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both sides prefault a chunk at a time, as it goes, and the puller reserves its new
    segment's pages a piece at a time: prefaulting (and reserving) the whole object when the
    pull began (and when serving began) held a node's loop for seconds with 1 GiB on a busy
    machine, so long that the other member declared that node dead mid-pull."""
    chunk = 1 * MiB
    a = TransferNode("tcp://127.0.0.1:0", f"{scratch}/a-store", 64 * MiB)
    b = TransferNode("tcp://127.0.0.1:0", f"{scratch}/b-store", 64 * MiB, chunk_size=chunk)
    try:
        data = pattern(12 * MiB, seed=10)
        oid = a.put(data)
        served, pulled = _record_prefaults(a), _record_prefaults(b)
        reserved: list[int] = []
        fallocate = os.posix_fallocate
        monkeypatch.setattr(os, "posix_fallocate", lambda fd, offset, length: (
            reserved.append(length), fallocate(fd, offset, length))[-1])
        assert b.pull(oid, a.address, len(data)).result(10) == oid
        assert reserved and max(reserved) <= RESERVE_PIECE, \
            f"the puller reserved {max(reserved)} bytes in one step"
        pulled, served = list(pulled), list(served)  # (digest_of below prefaults it all)
        assert b.digest_of(oid) == digest(data)
        assert pulled and served, "both sides prefault what they touch"
        assert max(pulled) <= chunk, f"the puller prefaulted {max(pulled)} bytes in one step"
        assert max(served) <= chunk, f"the holder prefaulted {max(served)} bytes in one step"
    finally:
        a.close()
        b.close()
