"""A simulated mesh leaves no directory behind: not when it is closed unstarted, and not
when its process was killed before it could close (the next mesh sweeps that one)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from zmesh.store.sweep import OWNER_FILE, process_start_time
from zmesh.testing.sim_mesh import SESSION_PREFIX, SimMesh


def _dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_mesh_closed_before_it_started_leaves_no_directory() -> None:
    mesh = SimMesh(seed=1)
    assert os.path.isdir(mesh._session)
    mesh.close()
    assert not os.path.exists(mesh._session)


def test_the_directory_of_a_mesh_whose_process_died_is_swept_by_the_next_one() -> None:
    first = SimMesh(seed=1)
    base = os.path.dirname(first._session)
    first.close()
    dead = os.path.join(base, f"{SESSION_PREFIX}killed-test")
    live = os.path.join(base, f"{SESSION_PREFIX}live-test")
    for path, pid in ((dead, _dead_pid()), (live, os.getpid())):
        os.makedirs(os.path.join(path, "stores", "n0"))
        with open(os.path.join(path, OWNER_FILE), "w") as f:
            f.write(f"{pid} {process_start_time(pid)}\n")
    try:
        mesh = SimMesh(seed=2)
        mesh.close()
        assert not os.path.exists(dead)
        assert os.path.isdir(live)  # its owner (this process) lives: kept
    finally:
        for path in (dead, live):
            shutil.rmtree(path, ignore_errors=True)
