"""SpillFiles: one file per spilled object, its own directory, nothing left after close."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from zmesh.errors import ObjectLostError
from zmesh.store.spill import SPILL_DIR_PREFIX, SpillFiles


def test_spilled_bytes_come_back_intact(tmp_path: Path) -> None:
    spill = SpillFiles(str(tmp_path))
    data = os.urandom(300_000)
    spill.write(b"obj-1", memoryview(data))
    assert b"obj-1" in spill and spill.count == 1 and spill.total_bytes == len(data)
    out = bytearray(len(data))
    spill.read_into(b"obj-1", memoryview(out))
    assert out == data
    spill.close()


def test_directory_is_made_on_first_spill_inside_the_parent_and_removed_by_close(
    tmp_path: Path,
) -> None:
    parent = tmp_path / "spill-parent"
    spill = SpillFiles(str(parent))
    assert spill.path is None and not parent.exists()
    spill.write(b"a", memoryview(b"xyz"))
    assert spill.path is not None
    assert os.path.dirname(spill.path) == str(parent)
    assert os.path.basename(spill.path).startswith(SPILL_DIR_PREFIX)
    assert os.stat(spill.path).st_mode & 0o777 == 0o700
    spill.close()
    assert os.listdir(parent) == []


def test_delete_removes_the_file(tmp_path: Path) -> None:
    spill = SpillFiles(str(tmp_path))
    spill.write(b"a", memoryview(b"xyz"))
    assert spill.path is not None
    spill.delete(b"a")
    assert os.listdir(spill.path) == [] and spill.count == 0
    spill.delete(b"a")  # already gone: nothing to do
    spill.close()


def test_truncated_spill_file_is_object_lost(tmp_path: Path) -> None:
    spill = SpillFiles(str(tmp_path))
    spill.write(b"a", memoryview(b"x" * 1000))
    assert spill.path is not None
    os.truncate(os.path.join(spill.path, b"a".hex()), 10)
    with pytest.raises(ObjectLostError, match="truncated at 10 of 1000"):
        spill.read_into(b"a", memoryview(bytearray(1000)))
    spill.close()


def test_reading_an_object_never_spilled_is_object_lost(tmp_path: Path) -> None:
    spill = SpillFiles(str(tmp_path))
    with pytest.raises(ObjectLostError, match="never spilled"):
        spill.read_into(b"nope", memoryview(bytearray(1)))
    spill.close()
