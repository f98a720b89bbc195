"""Fixtures for tests that start zmesh: a runtime per test, and a check that nothing leaks.

`no_zmesh_leaks` fails a test that leaves a zmesh process (node, fork server, worker), an ipc
session directory or an object-store directory behind.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import psutil
import pytest

import zmesh
from zmesh.runtime.launcher import session_root
from zmesh.store.sweep import default_store_root


def zmesh_processes() -> list[psutil.Process]:
    """This process's descendants: zmesh nodes, fork servers and workers it started."""
    try:
        return psutil.Process().children(recursive=True)
    except psutil.Error:
        return []


def all_gone(procs: list[psutil.Process]) -> bool:
    """True once every process in `procs` has exited (zombies count as gone)."""
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                return False
        except psutil.Error:
            pass
    return True


def started_runtimes() -> list[tuple[str, str]]:
    """(session dir, node id) of every runtime `zmesh.init` started in this process."""
    from zmesh import api

    return list(api._started)


def leftovers(started: list[tuple[str, str]]) -> list[str]:
    """Session and store directories of these runtimes that still exist."""
    root = default_store_root()
    out = []
    for session_dir, node_id in started:
        if session_dir.startswith(session_root()) and os.path.exists(session_dir):
            out.append(session_dir)
        if os.path.exists(os.path.join(root, node_id)):
            out.append(os.path.join(root, node_id))
    return out


def wait_until(predicate, timeout: float = 10.0, interval: float = 0.02) -> bool:  # type: ignore[no-untyped-def]
    """Poll `predicate` until it is true or `timeout` passes (for process exits, which have
    no event to wait on from outside)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())


@pytest.fixture
def no_zmesh_leaks() -> Iterator[None]:
    before = len(started_runtimes())
    yield
    procs = zmesh_processes()
    if zmesh.is_initialized():
        zmesh.shutdown()
    assert wait_until(lambda: all_gone(procs + zmesh_processes())), \
        f"zmesh processes left running: {[p.pid for p in procs if p.is_running()]}"
    mine = started_runtimes()[before:]
    assert wait_until(lambda: not leftovers(mine)), f"directories left: {leftovers(mine)}"


@pytest.fixture(scope="module")
def zmesh_module() -> Iterator[None]:
    """One runtime (2 CPUs) shared by the tests of a module; torn down and checked after."""
    before = len(started_runtimes())
    zmesh.init(num_cpus=2)
    yield
    procs = zmesh_processes()
    zmesh.shutdown()
    assert wait_until(lambda: all_gone(procs)), "zmesh processes left after shutdown"
    mine = started_runtimes()[before:]
    assert wait_until(lambda: not leftovers(mine)), f"directories left: {leftovers(mine)}"


@pytest.fixture
def ray(zmesh_module: None) -> object:
    """The zmesh module under Ray's name, initialised, for tests written as Ray programs."""
    return zmesh
