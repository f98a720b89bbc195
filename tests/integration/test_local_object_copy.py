"""Pulls between two stores on this machine copy the holder's file instead of the network,
and fall back to chunks, reading nothing, whenever the holder's answer does not check out.

The holder is a child process (`PeerProcess`) or this process (`TransferNode`), as in
test_object_transfer; both stores live under one private root (the scratch directory).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from typing import Any

import msgspec
import pytest
from runtime_fixtures import wait_until
from transfer_harness import MiB, PeerProcess, TransferNode, digest, pattern

from zmesh.protocol.messages.transfer import LocalReadOffer
from zmesh.store.local_read import COPY_PIECE

STORE_ROOT = "/dev/shm" if os.path.isdir("/dev/shm") else None
pytestmark = pytest.mark.skipif(not os.path.exists("/proc/sys/kernel/random/boot_id"),
                                reason="needs the kernel's boot id (Linux)")


@pytest.fixture
def scratch() -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="zl-", dir=STORE_ROOT)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def peer(scratch: str) -> Iterator[PeerProcess]:
    p = PeerProcess("tcp://127.0.0.1:0", f"{scratch}/peer-store", 256 * MiB)
    yield p
    p.close()


@pytest.fixture
def local(scratch: str) -> Iterator[TransferNode]:
    node = TransferNode("tcp://127.0.0.1:0", f"{scratch}/local-store", 256 * MiB,
                        local_root=scratch, stall_timeout=5.0, retries=1)
    yield node
    node.close()


def test_a_same_host_pull_copies_the_file_not_the_network(
    peer: PeerProcess, local: TransferNode
) -> None:
    size = 2 * COPY_PIECE + 12345  # several copy steps, a ragged last one
    oid, expected = peer.put(size, seed=1)
    assert local.pull(oid, peer.address, size).result(60) == oid
    assert local.digest_of(oid) == expected
    assert local.call(lambda: local.store._entries[oid].secondary)
    state = local.state()
    assert (state["local_copies"], state["local_bytes"], state["bytes_received"],
            state["local_fallbacks"]) == (1, size, 0, 0)
    # The holder pinned it for the copy and let go when the puller said it was done.
    assert peer.state()["local_offers"] == 1
    assert wait_until(lambda: peer.state()["num_pinned"] == 0, timeout=10)
    assert peer.state()["serving_sessions"] == 0


def test_small_objects_sharing_an_arena_segment_copy_from_their_own_offsets(
    peer: PeerProcess, local: TransferNode
) -> None:
    objects = [(size, *peer.put(size, seed=10 + i))
               for i, size in enumerate([1, 4096, 200_000, 3 * MiB + 7, 5])]
    futures = [local.pull(oid, peer.address, size) for size, oid, _ in objects]
    for fut, (_, oid, expected) in zip(futures, objects):
        assert fut.result(60) == oid
        assert local.digest_of(oid) == expected
    state = local.state()
    assert state["local_copies"] == len(objects) and state["bytes_received"] == 0
    assert wait_until(lambda: peer.state()["num_pinned"] == 0, timeout=10)


def _forge(local: TransferNode, change: Callable[[LocalReadOffer], dict[str, Any]]) -> None:
    """Rewrite every LocalReadOffer this node receives before the transfer sees it."""
    real = local.transfer.on_local_offer

    def forged(sender: str, msg: LocalReadOffer, bufs: list[Any]) -> None:
        real(sender, msgspec.structs.replace(msg, **change(msg)), bufs)

    local.call(local.loop.on, LocalReadOffer, forged)


def _copy_file(src: str, dst: str, mode: int) -> os.stat_result:
    shutil.copyfile(src, dst)
    os.chmod(dst, mode)
    return os.stat(dst)


def _evil_dir(scratch: str, name: str, mode: int = 0o700) -> str:
    path = os.path.join(scratch, name)
    os.mkdir(path, mode)
    os.chmod(path, mode)
    return path


FORGERIES: dict[str, tuple[Callable[[str, LocalReadOffer], dict[str, Any]], str]] = {
    "outside the store root": (
        lambda scratch, m: {"path": "/etc/passwd"}, "not in a node directory under"),
    "a dot-dot path": (
        lambda scratch, m: {"path": os.path.join(scratch, "x", "..",
                                                 os.path.relpath(m.path, scratch))},
        "not a plain absolute path"),
    "not a segment file": (
        lambda scratch, m: {"path": os.path.join(os.path.dirname(m.path), "owner.pid")},
        "not a store segment file"),
    "a symlink to the real file": (
        lambda scratch, m: (os.symlink(m.path, os.path.join(_evil_dir(scratch, "ln"), "seg-0"))
                            or {"path": os.path.join(scratch, "ln", "seg-0")}),
        "cannot open"),
    "a symlinked node directory": (
        lambda scratch, m: (os.symlink(os.path.dirname(m.path), os.path.join(scratch, "dl"))
                            or {"path": os.path.join(scratch, "dl", os.path.basename(m.path))}),
        "cannot open"),
    "a file others may read": (
        lambda scratch, m: (lambda st: {"path": os.path.join(scratch, "loose", "seg-0"),
                                        "dev": st.st_dev, "ino": st.st_ino})(
            _copy_file(m.path, os.path.join(_evil_dir(scratch, "loose"), "seg-0"), 0o644)),
        "has mode 0o644"),
    "a directory others may enter": (
        lambda scratch, m: (lambda st: {"path": os.path.join(scratch, "open", "seg-0"),
                                        "dev": st.st_dev, "ino": st.st_ino})(
            _copy_file(m.path, os.path.join(_evil_dir(scratch, "open", 0o755), "seg-0"),
                       0o600)),
        "has mode 0o755"),
    "a wrong identity": (lambda scratch, m: {"ino": m.ino + 1}, "not the file the holder named"),
    "another machine's boot id": (
        lambda scratch, m: {"boot_id": "0" * 36}, "another machine"),
    "bytes past the end of the file": (
        lambda scratch, m: {"offset": 1 << 40}, "lie outside"),
}


@pytest.mark.parametrize("forgery", sorted(FORGERIES))
def test_a_forged_answer_is_refused_and_the_pull_falls_back_to_chunks(
    forgery: str, scratch: str, peer: PeerProcess, local: TransferNode
) -> None:
    change, reason = FORGERIES[forgery]
    _forge(local, lambda m: change(scratch, m))
    size = 3 * MiB + 5
    oid, expected = peer.put(size, seed=3)
    assert local.pull(oid, peer.address, size).result(60) == oid
    assert local.digest_of(oid) == expected
    state = local.state()
    assert (state["local_copies"], state["local_fallbacks"], state["bytes_received"]) == (
        0, 1, size)
    assert reason in local.transfer.last_local_refusal
    # The holder's local pin and its chunk session both end with the transfer.
    assert wait_until(lambda: peer.state()["num_pinned"] == 0, timeout=10)


def test_a_holder_that_never_answers_the_local_request_is_pulled_in_chunks(
    peer: PeerProcess, scratch: str
) -> None:
    node = TransferNode("tcp://127.0.0.1:0", f"{scratch}/quiet-store", 64 * MiB,
                        local_root=scratch, stall_timeout=0.5, retries=1)
    try:
        node.call(node.loop.on, LocalReadOffer, lambda *a: None)  # every offer is lost
        size = MiB + 1
        oid, expected = peer.put(size, seed=4)
        assert node.pull(oid, peer.address, size).result(60) == oid
        assert node.digest_of(oid) == expected
        assert node.state()["local_fallbacks"] == 1
    finally:
        node.close()


@pytest.mark.parametrize("noticed_by", ["membership", "idle timeout"])
def test_a_puller_killed_mid_copy_leaves_no_pin_on_the_holder(
    noticed_by: str, scratch: str
) -> None:
    holder = TransferNode("tcp://127.0.0.1:0", f"{scratch}/holder-store", 256 * MiB,
                          session_timeout=1.0)
    puller = PeerProcess("tcp://127.0.0.1:0", f"{scratch}/puller-store", 256 * MiB,
                         local_root=scratch)
    try:
        size = COPY_PIECE + 3 * MiB  # two copy steps: it dies between them
        oid = holder.put(pattern(size, 5))
        assert puller.command("die-mid-local-copy") == "ok"
        assert puller.command("pull", oid.hex(), holder.address, size) == "ok"
        assert puller.proc.wait(60) == -9
        state = holder.state()
        assert (state["local_offers"], state["num_pinned"]) == (1, 1)  # pinned mid-copy
        if noticed_by == "membership":
            holder.call(holder.transfer.peer_died, puller.address)
            assert holder.state()["num_pinned"] == 0
        else:
            assert wait_until(lambda: holder.state()["num_pinned"] == 0, timeout=20)
        assert holder.state()["serving_sessions"] == 0
        # and the object is still whole for the next reader
        assert holder.digest_of(oid) == digest(pattern(size, 5))
    finally:
        puller.close()
        holder.close()


def _open_files_under(directory: str) -> list[str]:
    """The files under `directory` this process holds open."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # (closed meanwhile: the listing's own fd)
        if target.startswith(directory + os.sep):
            found.append(target)
    return found


def test_a_puller_closed_mid_copy_closes_the_holders_file(
    peer: PeerProcess, scratch: str
) -> None:
    # before, the open file was closed only by the copy's next step, which never runs once
    # the loop has stopped: every close mid-copy leaked an fd of the holder's segment file
    node = TransferNode("tcp://127.0.0.1:0", f"{scratch}/closing-store", 256 * MiB,
                        local_root=scratch)
    try:
        step = node.transfer._copy_step
        between = threading.Event()

        def stepping(tid: int, fd: int, src_offset: int, done: int) -> None:
            if done > 0:  # the loop stops before the second step runs
                between.set()
                return
            step(tid, fd, src_offset, done)

        def install() -> None:
            node.transfer._copy_step = stepping  # type: ignore[method-assign]

        node.call(install)
        size = COPY_PIECE + 3 * MiB  # two copy steps
        oid, _ = peer.put(size, seed=7)
        node.pull(oid, peer.address, size)
        assert between.wait(60)
        holder_files = os.path.realpath(f"{scratch}/peer-store")
        assert _open_files_under(holder_files), "the copy holds the holder's file open"
    finally:
        node.close()
    assert not _open_files_under(holder_files)


def test_a_copy_longer_than_the_holders_idle_timeout_keeps_its_pin(
    scratch: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The holder drops a local read's pin after `session_timeout` idle seconds; a copy that
    # took longer (a huge object, a slow disk, a busy machine) went on reading a file region
    # the holder no longer kept for it: nothing reached the holder during the copy. The
    # puller now asks again every quarter of that timeout, which renews the pin. Here the
    # copy steps are 1 MiB and each waits 0.3 s on the puller's loop (a slow disk): 16 steps,
    # about 5 s, against a 2 s timeout.
    from zmesh.runtime.node import object_transfer

    monkeypatch.setattr(object_transfer, "COPY_PIECE", MiB)
    holder = TransferNode("tcp://127.0.0.1:0", f"{scratch}/holder-store", 64 * MiB,
                          session_timeout=2.0)
    puller = TransferNode("tcp://127.0.0.1:0", f"{scratch}/puller-store", 64 * MiB,
                          local_root=scratch, session_timeout=2.0, stall_timeout=30.0)
    try:
        size = 16 * MiB
        oid = holder.put(pattern(size, 9))
        step = puller.transfer._copy_step
        pinned: list[int] = []

        def slow_step(tid: int, fd: int, src_offset: int, done: int) -> None:
            if done == 0:
                step(tid, fd, src_offset, done)
                return

            def later() -> None:
                pinned.append(holder.state()["num_pinned"])
                step(tid, fd, src_offset, done)

            puller.loop.call_later(0.3, later)

        def install() -> None:
            puller.transfer._copy_step = slow_step  # type: ignore[method-assign]

        puller.call(install)
        assert puller.pull(oid, holder.address, size).result(60) == oid
        assert puller.digest_of(oid) == digest(pattern(size, 9))
        assert puller.state()["local_copies"] == 1 and puller.state()["bytes_received"] == 0
        assert len(pinned) == 15 and pinned == [1] * 15, pinned  # held all along
        assert wait_until(lambda: holder.state()["num_pinned"] == 0, timeout=10)  # PullDone
        assert holder.state()["serving_sessions"] == 0
    finally:
        puller.close()
        holder.close()


def test_a_local_copy_that_runs_out_of_room_fails_the_pull(
    peer: PeerProcess, local: TransferNode, scratch: str
) -> None:
    # Before, the holder's file was closed twice (at once, then by the end of the transfer):
    # the second close raised EBADF before the pull's waiters were told, and it hung.
    from zmesh.errors import ObjectStoreFullError

    size = COPY_PIECE + 3 * MiB  # two copy steps: the second finds no room
    oid, _ = peer.put(size, seed=11)
    reserve = local.store.reserve
    calls = [0]

    def full_at_the_second(object_id: bytes, offset: int, length: int) -> None:
        calls[0] += 1
        if calls[0] == 2:
            raise ObjectStoreFullError("no room left (test)")
        reserve(object_id, offset, length)

    local.call(setattr, local.store, "reserve", full_at_the_second)
    with pytest.raises(ObjectStoreFullError):
        local.pull(oid, peer.address, size).result(60)
    assert not _open_files_under(os.path.realpath(f"{scratch}/peer-store"))
    assert local.state()["num_pinned"] == 0
