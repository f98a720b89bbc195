"""Leak checks for transports: a test fails if it leaves an endpoint, fd, thread or ipc file.

`no_transport_leaks` snapshots live endpoints, open file descriptors and OS threads before
the test and compares after it; zmq contexts show up as both (I/O threads, eventfds and
epoll fds). `ipc_dir` gives a short private directory for ipc sockets (unix socket paths are
limited to 107 bytes) and fails if a socket file is left in it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator

import pytest
import zmq

from zmesh.transports import Endpoint, live_endpoints

__all__ = ["LeakCheck", "TransportLeak", "ipc_dir", "no_transport_leaks", "private_ipc_dir"]

# Closed zmq sockets are reaped by the context's reaper thread; give it this long to finish.
_SETTLE_SECONDS = 2.0


class TransportLeak(AssertionError):
    """Something a transport opened outlived the test."""


def _fds() -> dict[str, str]:
    result = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            result[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # the fd listdir itself used, already gone
    return result


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _warm_pyzmq_gc() -> None:
    # pyzmq frees zero-copy frames through one process-wide gc thread with its own context,
    # started on first use and kept until exit; start it now so it is not counted as a leak.
    zmq.Frame(bytearray(zmq.COPY_THRESHOLD * 2), copy=False)


class LeakCheck:
    """A snapshot of transport resources; `verify()` raises TransportLeak if any were added."""

    def __init__(self) -> None:
        _warm_pyzmq_gc()
        self.endpoints = {id(e) for e in live_endpoints()}
        self.fds = _fds()
        self.threads = _threads()

    def leaked_endpoints(self) -> list[Endpoint]:
        return [e for e in live_endpoints() if id(e) not in self.endpoints]

    def verify(self) -> None:
        """Raise TransportLeak naming what was left open; closes leaked endpoints first."""
        leaked = self.leaked_endpoints()
        for endpoint in leaked:
            endpoint.close()
        if leaked:
            raise TransportLeak(f"endpoints left open: {leaked}")
        deadline = time.monotonic() + _SETTLE_SECONDS
        while True:
            new_fds = {fd: target for fd, target in _fds().items() if fd not in self.fds}
            extra_threads = _threads() - self.threads
            if not new_fds and extra_threads <= 0:
                return
            if time.monotonic() > deadline:
                raise TransportLeak(
                    f"left open after the test: {len(new_fds)} file descriptors "
                    f"{sorted(new_fds.values())} and {max(extra_threads, 0)} threads"
                )
            time.sleep(0.01)  # polling the reaper's progress; there is nothing to wait on


@pytest.fixture
def no_transport_leaks() -> Iterator[LeakCheck]:
    """Fail the test if it leaves an endpoint, file descriptor or thread behind."""
    check = LeakCheck()
    yield check
    check.verify()


@contextlib.contextmanager
def private_ipc_dir() -> Iterator[str]:
    """A private (0700), short directory for ipc sockets; raises if a socket is left in it."""
    path = tempfile.mkdtemp(prefix="zm-", dir="/tmp")
    try:
        yield path
        left = [
            name
            for name in os.listdir(path)
            if stat.S_ISSOCK(os.lstat(os.path.join(path, name)).st_mode)
        ]
        if left:
            raise TransportLeak(f"ipc socket files left in {path}: {sorted(left)}")
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def ipc_dir() -> Iterator[str]:
    """A private directory for ipc sockets; fails the test if a socket file is left in it."""
    with private_ipc_dir() as path:
        yield path
