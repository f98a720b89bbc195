"""Per-node store directories, and the sweep that removes those of dead nodes.

Every node keeps its segment files in `<root>/<node_id>/`, next to an `owner.pid` file
holding its pid and that process's start time (so a recycled pid does not pass for the
owner). A node that starts sweeps the directories whose owner is gone, so a crashed node
leaves nothing behind in /dev/shm for longer than the next start.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import tempfile
import time

from zmesh.store.spill import SPILL_DIR_PREFIX

OWNER_FILE = "owner.pid"
SPILL_RECORD_FILE = "spill-dir"
"""Holds the path of the node's spill directory (on disk, elsewhere), for the sweep."""

_NODE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
_UNOWNED_GRACE_S = 60.0
"""A directory without an owner file may be one a node is making right now."""


def default_store_root() -> str:
    """`/dev/shm/zmesh-<uid>` where /dev/shm exists (RAM), else `$TMPDIR/zmesh-<uid>`."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
    return os.path.join(base, f"zmesh-{os.getuid()}")


def ensure_store_root(root: str) -> str:
    """Create `root` (mode 0700) or check that the existing one is ours and private."""
    try:
        os.makedirs(root, mode=0o700)
    except FileExistsError:
        pass
    st = os.lstat(root)
    if not stat.S_ISDIR(st.st_mode):
        raise PermissionError(f"store root {root} is not a directory (a symlink?); remove it")
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise PermissionError(
            f"store root {root} must be owned by uid {os.getuid()} with mode 0700, "
            f"found uid {st.st_uid} mode {oct(st.st_mode & 0o777)}; remove it or fix it"
        )
    return root


def create_node_store_dir(root: str, node_id: str) -> str:
    """Make `<root>/<node_id>` (mode 0700) owned by this process; returns its path."""
    if not _NODE_ID.fullmatch(node_id):
        raise ValueError(
            f"node id {node_id!r} cannot name a store directory: use letters, digits, '_', '.', '-'"
        )
    path = os.path.join(root, node_id)
    for _ in range(3):  # another node may remove the (empty) root between our two calls
        ensure_store_root(root)
        try:
            os.mkdir(path, mode=0o700)
            break
        except FileNotFoundError:
            continue
    else:
        os.mkdir(path, mode=0o700)
    write_owner_file(path)
    return path


def write_owner_file(path: str) -> None:
    """Mark directory `path` as this process's (its pid and start time, written atomically),
    so that a sweep can tell when its owner is dead."""
    pid = os.getpid()
    tmp = os.path.join(path, f".{OWNER_FILE}.tmp")
    with open(tmp, "w") as f:
        f.write(f"{pid} {process_start_time(pid)}\n")
    os.replace(tmp, os.path.join(path, OWNER_FILE))


def remove_node_store_dir(path: str) -> None:
    """Remove a node's store directory and the spill directory it recorded."""
    _remove_recorded_spill_dir(path)
    shutil.rmtree(path, ignore_errors=True)
    try:  # the last node out takes the shared root with it
        os.rmdir(os.path.dirname(path))
    except OSError:
        pass


def sweep_dead_stores(root: str | None = None) -> list[str]:
    """Remove the store directories under `root` whose owner process is dead; returns them."""
    root = default_store_root() if root is None else root
    try:
        entries = list(os.scandir(root))
    except FileNotFoundError:
        return []
    removed = []
    for entry in entries:
        if entry.is_dir(follow_symlinks=False) and not _owner_alive(entry.path):
            remove_node_store_dir(entry.path)
            removed.append(entry.path)
    return sorted(removed)


def sweep_dead_owned_dirs(base: str, prefix: str) -> list[str]:
    """Remove the directories `<base>/<prefix>*` whose owner (`write_owner_file`) is dead:
    what a process killed before its own cleanup left behind; returns them."""
    try:
        entries = [e for e in os.scandir(base) if e.name.startswith(prefix)]
    except FileNotFoundError:
        return []
    removed = []
    for entry in entries:
        if entry.is_dir(follow_symlinks=False) and not _owner_alive(entry.path):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.path)
    return sorted(removed)


def process_start_time(pid: int) -> int:
    """The start time of process `pid` in clock ticks since boot (0 where unknown)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return 0
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = data[data.rindex(b")") + 2 :].split()
    return int(fields[19])


def pid_alive(pid: int) -> bool:
    """True while process `pid` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def _owner_alive(path: str) -> bool:
    try:
        with open(os.path.join(path, OWNER_FILE)) as f:
            pid_text, start_text = f.read().split()
        pid, start = int(pid_text), int(start_text)
    except FileNotFoundError:
        with contextlib.suppress(FileNotFoundError):
            return time.time() - os.stat(path).st_mtime < _UNOWNED_GRACE_S
        return True
    except (OSError, ValueError):
        return False
    if not pid_alive(pid):
        return False
    return start == 0 or process_start_time(pid) in (0, start)


def _remove_recorded_spill_dir(path: str) -> None:
    try:
        with open(os.path.join(path, SPILL_RECORD_FILE)) as f:
            spill = f.read().strip()
    except OSError:
        return
    # Only a directory this user made for spilling: the record is not trusted blindly.
    if not os.path.basename(spill).startswith(SPILL_DIR_PREFIX):
        return
    try:
        st = os.lstat(spill)
    except OSError:
        return
    if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid():
        shutil.rmtree(spill, ignore_errors=True)
