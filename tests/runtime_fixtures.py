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


def store_dirs() -> set[str]:
    root = default_store_root()
    try:
        return {os.path.join(root, d) for d in os.listdir(root)}
    except FileNotFoundError:
        return set()


def session_dirs() -> set[str]:
    root = session_root()
    return {os.path.join(root, d) for d in os.listdir(root)}


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
    before_stores, before_sessions = store_dirs(), session_dirs()
    yield
    procs = zmesh_processes()
    if zmesh.is_initialized():
        zmesh.shutdown()
    assert wait_until(lambda: all_gone(procs + zmesh_processes())), \
        f"zmesh processes left running: {[p.pid for p in procs if p.is_running()]}"
    assert wait_until(lambda: not (store_dirs() - before_stores)), \
        f"object store dirs left: {store_dirs() - before_stores}"
    assert not (session_dirs() - before_sessions), \
        f"session dirs left: {session_dirs() - before_sessions}"


@pytest.fixture(scope="module")
def zmesh_module() -> Iterator[None]:
    """One runtime (2 CPUs) shared by the tests of a module; torn down and checked after."""
    zmesh.init(num_cpus=2)
    yield
    procs = zmesh_processes()
    zmesh.shutdown()
    assert wait_until(lambda: all_gone(procs)), "zmesh processes left after shutdown"


@pytest.fixture
def ray(zmesh_module: None) -> object:
    """The zmesh module under Ray's name, initialised, for tests written as Ray programs."""
    return zmesh
