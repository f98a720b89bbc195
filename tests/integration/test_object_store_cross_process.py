"""The object store across real processes: shared segments, zero-copy reads, the sweep."""

from __future__ import annotations

import gc
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from zmesh.store.mapping import StoreMapper
from zmesh.store.object_store import ObjectStore
from zmesh.store.sweep import create_node_store_dir, remove_node_store_dir, sweep_dead_stores

MiB = 1 << 20

CHILD_WRITES = """
import sys
import numpy as np
from zmesh.store.arena import Location
from zmesh.store.mapping import StoreMapper
directory, segment, offset, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
mapper = StoreMapper(directory)
with mapper.writable(Location(segment, offset, size)) as view:
    np.frombuffer(view, np.uint8)[:] = np.arange(size, dtype=np.uint64) % 251
mapper.close()
"""

CHILD_READS = """
import sys, zlib
from zmesh.store.arena import Location
from zmesh.store.mapping import StoreMapper
directory, segment, offset, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
mapper = StoreMapper(directory)
view = mapper.readable(Location(segment, offset, size), lambda: print("released"))
print(zlib.crc32(view))
del view
mapper.close()
"""

CHILD_OWNS_A_STORE = """
import sys
from zmesh.store.sweep import create_node_store_dir
print(create_node_store_dir(sys.argv[1], sys.argv[2]), flush=True)
sys.stdin.read()  # stay alive until the parent closes our stdin
"""


@pytest.fixture
def shm_dir() -> Iterator[Path]:
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    path = Path(tempfile.mkdtemp(prefix="zmesh-test-", dir=base))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def run_child(code: str, *args: object) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code, *map(str, args)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_child_writes_and_parent_reads_zero_copy(shm_dir: Path) -> None:
    store = ObjectStore(str(shm_dir / "node"), 64 * MiB, segment_size=16 * MiB)
    mapper = StoreMapper(store.directory)
    oid = b"o" * 20
    size = 8 * MiB + 123
    loc = store.allocate(oid, size, owner="child")
    run_child(CHILD_WRITES, store.directory, loc.segment, loc.offset, loc.size)
    store.seal(oid)

    released: list[bool] = []
    pinned = store.pin(oid, "parent")
    view = mapper.readable(pinned, lambda: (released.append(True), store.unpin(oid, "parent")))
    array = np.frombuffer(view, dtype=np.uint8)
    assert np.array_equal(array, (np.arange(size, dtype=np.uint64) % 251).astype(np.uint8))

    mm = mapper._ro[pinned.segment].mm
    whole = np.frombuffer(mm, dtype=np.uint8)
    assert whole.ctypes.data <= array.ctypes.data < whole.ctypes.data + len(mm)
    assert array.ctypes.data == whole.ctypes.data + pinned.offset
    del whole

    del view
    gc.collect()
    assert not released, "the array still uses the bytes"
    del array
    gc.collect()
    assert released == [True]
    assert store.stats().num_pinned == 0

    store.free(oid)
    mapper.close()
    store.close()
    assert not os.path.exists(store.directory)
    assert os.listdir(shm_dir) == []


def test_parent_writes_and_child_reads(shm_dir: Path) -> None:
    import zlib

    store = ObjectStore(str(shm_dir / "node"), 32 * MiB, segment_size=16 * MiB)
    mapper = StoreMapper(store.directory)
    loc = store.allocate(b"p" * 20, 3 * MiB, owner="parent")
    data = os.urandom(loc.size)
    with mapper.writable(loc) as view:
        view[:] = data
    store.seal(b"p" * 20)
    out = run_child(CHILD_READS, store.directory, loc.segment, loc.offset, loc.size).split()
    assert out == [str(zlib.crc32(data)), "released"]
    mapper.close()
    store.close()


def test_sweep_removes_a_dead_nodes_directory_and_keeps_live_ones(shm_dir: Path) -> None:
    root = str(shm_dir / "root")
    mine = create_node_store_dir(root, "this-node")

    dead = run_child(CHILD_OWNS_A_STORE, root, "dead-node").strip()
    # That child found stdin empty and exited: its directory is an orphan.
    assert os.path.isdir(dead)

    live = subprocess.Popen(
        [sys.executable, "-c", CHILD_OWNS_A_STORE, root, "live-node"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert live.stdout is not None and live.stdin is not None
        live_dir = live.stdout.readline().strip()
        assert sweep_dead_stores(root) == [dead]
        assert os.path.isdir(mine) and os.path.isdir(live_dir)
        live.stdin.close()
        assert live.wait(timeout=60) == 0
        assert sweep_dead_stores(root) == [live_dir]
    finally:
        if live.poll() is None:
            live.kill()
            live.wait()
        if live.stdout is not None:
            live.stdout.close()
    assert os.path.isdir(mine)
    remove_node_store_dir(mine)
    assert not os.path.exists(root)  # the last node out removes the shared root too
