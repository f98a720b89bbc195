"""Spill files: where primary copies go when the arena is over budget, one file per object.

Each store spills into its own directory `zmesh-spill-XXXX`, made on first spill inside
the given parent (default: the system temp dir, on disk; spilling to /dev/shm would free
no RAM) and removed with everything in it by `close()`.
"""

from __future__ import annotations

import os
import shutil
import tempfile

from zmesh.errors import ObjectLostError

SPILL_DIR_PREFIX = "zmesh-spill-"
_WRITE_CHUNK = 64 << 20


class SpillFiles:
    """Object bytes saved to and restored from files named by object id."""

    def __init__(self, parent: str | None = None) -> None:
        self._parent = parent
        self._path: str | None = None
        self._sizes: dict[bytes, int] = {}

    @property
    def path(self) -> str | None:
        """The spill directory, or None until the first spill."""
        return self._path

    def ensure_dir(self) -> str:
        """Make the spill directory now (if not yet) and return its path."""
        if self._path is None:
            self._path = self._make_dir()
        return self._path

    @property
    def count(self) -> int:
        return len(self._sizes)

    @property
    def total_bytes(self) -> int:
        return sum(self._sizes.values())

    def __contains__(self, object_id: bytes) -> bool:
        return object_id in self._sizes

    def write(self, object_id: bytes, data: memoryview) -> None:
        """Save `data` as the object's spill file; OSError (disk full...) leaves no file."""
        path = self._file(object_id)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            with memoryview(data).cast("B") as flat:
                pos = 0
                while pos < len(flat):
                    pos += os.write(fd, flat[pos : pos + _WRITE_CHUNK])
        except BaseException:
            os.close(fd)
            os.unlink(path)
            raise
        os.close(fd)
        self._sizes[object_id] = len(data)

    def read_into(self, object_id: bytes, out: memoryview) -> None:
        """Fill `out` from the object's spill file; ObjectLostError if it is gone or short."""
        size = self._sizes.get(object_id)
        if size is None:
            raise ObjectLostError(f"object {object_id.hex()} was never spilled here")
        if size != len(out):
            raise ValueError(
                f"object {object_id.hex()} spilled {size} bytes, buffer has {len(out)}"
            )
        path = self._file(object_id)
        try:
            with open(path, "rb", buffering=0) as f:
                pos = 0
                while pos < size:
                    n = f.readinto(out[pos:])
                    if not n:
                        raise ObjectLostError(
                            f"spill file {path} of object {object_id.hex()} is truncated "
                            f"at {pos} of {size} bytes"
                        )
                    pos += n
        except FileNotFoundError:
            raise ObjectLostError(
                f"spill file {path} of object {object_id.hex()} is gone"
            ) from None

    def delete(self, object_id: bytes) -> None:
        """Remove the object's spill file (no error if there is none)."""
        if self._sizes.pop(object_id, None) is None:
            return
        try:
            os.unlink(self._file(object_id))
        except FileNotFoundError:
            pass

    def close(self) -> None:
        """Remove every spill file and the spill directory."""
        self._sizes.clear()
        if self._path is not None:
            shutil.rmtree(self._path, ignore_errors=True)
        self._path = None

    def _file(self, object_id: bytes) -> str:
        return os.path.join(self.ensure_dir(), object_id.hex())

    def _make_dir(self) -> str:
        if self._parent is not None:
            os.makedirs(self._parent, mode=0o700, exist_ok=True)
        return tempfile.mkdtemp(prefix=SPILL_DIR_PREFIX, dir=self._parent)
