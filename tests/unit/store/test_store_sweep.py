"""Store directories: private, owned by a live process, swept once the owner is gone."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from zmesh.store.sweep import (
    OWNER_FILE,
    SPILL_RECORD_FILE,
    create_node_store_dir,
    default_store_root,
    process_start_time,
    sweep_dead_stores,
)


def test_default_root_is_per_user_in_shared_memory() -> None:
    root = default_store_root()
    assert root.endswith(f"zmesh-{os.getuid()}")
    if os.path.isdir("/dev/shm"):
        assert root.startswith("/dev/shm/")


def test_node_store_dir_is_private_and_names_its_owner(tmp_path: Path) -> None:
    root = tmp_path / "root"
    path = create_node_store_dir(str(root), "node-1")
    assert os.stat(root).st_mode & 0o777 == 0o700
    assert os.stat(path).st_mode & 0o777 == 0o700
    pid, start = (Path(path) / OWNER_FILE).read_text().split()
    assert int(pid) == os.getpid()
    assert int(start) == process_start_time(os.getpid())


def test_a_live_owner_keeps_its_directory(tmp_path: Path) -> None:
    path = create_node_store_dir(str(tmp_path / "root"), "node-1")
    assert sweep_dead_stores(str(tmp_path / "root")) == []
    assert os.path.isdir(path)


def test_a_recycled_pid_does_not_pass_for_the_owner(tmp_path: Path) -> None:
    path = create_node_store_dir(str(tmp_path / "root"), "node-1")
    # Our pid with another start time: the process that made the dir is gone.
    (Path(path) / OWNER_FILE).write_text(f"{os.getpid()} {process_start_time(os.getpid()) + 1}\n")
    assert sweep_dead_stores(str(tmp_path / "root")) == [path]
    assert not os.path.exists(path)


def test_directory_without_owner_file_is_kept_while_young_then_removed(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir(mode=0o700)
    young = root / "being-made"
    young.mkdir()
    assert sweep_dead_stores(str(root)) == []
    old = time.time() - 3600
    os.utime(young, (old, old))
    assert sweep_dead_stores(str(root)) == [str(young)]


def test_corrupt_owner_file_counts_as_dead(tmp_path: Path) -> None:
    path = create_node_store_dir(str(tmp_path / "root"), "node-1")
    (Path(path) / OWNER_FILE).write_text("garbage")
    assert sweep_dead_stores(str(tmp_path / "root")) == [path]


def test_sweep_removes_the_recorded_spill_dir_of_a_dead_store(tmp_path: Path) -> None:
    path = create_node_store_dir(str(tmp_path / "root"), "node-1")
    spill = tmp_path / "zmesh-spill-abc"
    spill.mkdir()
    (spill / "0011").write_bytes(b"x")
    outside = tmp_path / "precious"
    outside.mkdir()
    (Path(path) / SPILL_RECORD_FILE).write_text(f"{spill}\n")
    (Path(path) / OWNER_FILE).write_text("999999999 1\n")
    assert sweep_dead_stores(str(tmp_path / "root")) == [path]
    assert not spill.exists()
    assert outside.exists()


def test_a_recorded_path_that_is_not_a_spill_dir_is_left_alone(tmp_path: Path) -> None:
    path = create_node_store_dir(str(tmp_path / "root"), "node-1")
    precious = tmp_path / "precious"
    precious.mkdir()
    (Path(path) / SPILL_RECORD_FILE).write_text(f"{precious}\n")
    (Path(path) / OWNER_FILE).write_text("999999999 1\n")
    sweep_dead_stores(str(tmp_path / "root"))
    assert precious.exists()


def test_sweep_of_a_missing_root_finds_nothing(tmp_path: Path) -> None:
    assert sweep_dead_stores(str(tmp_path / "nope")) == []


@pytest.mark.parametrize("node_id", ["", "../x", "a/b", ".hidden", "x" * 200])
def test_node_ids_that_cannot_name_a_directory_are_refused(tmp_path: Path, node_id: str) -> None:
    with pytest.raises(ValueError, match="node id"):
        create_node_store_dir(str(tmp_path), node_id)


def test_a_root_others_can_open_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir(mode=0o755)
    os.chmod(root, 0o755)
    with pytest.raises(PermissionError, match="mode 0700"):
        create_node_store_dir(str(root), "node-1")


def test_a_symlinked_root_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(PermissionError, match="not a directory"):
        create_node_store_dir(str(tmp_path / "link"), "node-1")
