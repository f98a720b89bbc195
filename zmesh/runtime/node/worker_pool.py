"""The node's worker pool: a fork server it feeds requests to, and the workers it made.

Workers are forked ahead of demand so a lease or a new actor rarely waits for one; the
fork server reports every worker's exit with its wait status, which the node turns into
a clear error for whoever the worker served.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import threading
from collections.abc import Callable
from typing import Any

import msgspec

from zmesh.runtime.node import zygote
from zmesh.runtime.node.zygote import RecordReader, write_record

_early: tuple[int, socket.socket, str] | None = None


def fork_server(node_address: str, session_dir: str) -> tuple[int, socket.socket]:
    """Fork the fork server from this process; returns (its pid, our end of its socket).

    Forked rather than started afresh: it skips an interpreter start-up and imports only
    what it still lacks. It never touches this process's zmq context (its workers make their
    own after their fork).
    """
    parent, child = socket.socketpair()
    node_pid = os.getpid()
    pid = os.fork()
    if pid == 0:  # the fork server
        try:
            parent.close()
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, signal.SIG_DFL)
            os.environ.setdefault("PYTHONUNBUFFERED", "1")
            zygote.main(child.fileno(), node_address, session_dir, node_pid)
        finally:
            os._exit(0)
    child.close()
    return pid, parent


def fork_server_early(node_address: str, session_dir: str) -> None:
    """Start the fork server first thing in a node process, so that it imports the worker's
    modules while the node imports its own (two cores, half the start-up)."""
    global _early
    pid, sock = fork_server(node_address, session_dir)
    _early = (pid, sock, node_address)


class WorkerInfo(msgspec.Struct, eq=False, dict=True):
    """A worker process as its node tracks it."""

    worker_id: bytes
    pid: int = 0
    address: str = ""
    state: str = "starting"  # starting, idle, leased, actor, dead
    lease_id: bytes = b""
    actor_id: bytes = b""
    env_key: tuple[tuple[str, str], ...] = ()
    waiters: list[Callable[[WorkerInfo], None]] = msgspec.field(default_factory=list)


class WorkerPool:
    """Starts workers through the fork server and reports their exits to the node's loop."""

    def __init__(self, node_address: str, session_dir: str,
                 post: Callable[..., None], on_exit: Callable[[int, int], None],
                 env_vars: dict[str, str] | None = None) -> None:
        self._post = post
        self._on_exit = on_exit
        global _early
        if _early is not None:
            # forked at the start of the process, already importing what workers need
            self.zygote_pid, self._sock = _early[0], _early[1]
            _early = None
        else:
            self.zygote_pid, self._sock = fork_server(node_address, session_dir)
        if env_vars:
            write_record(self._sock, {"op": "env", "env": env_vars})
        self.by_id: dict[bytes, WorkerInfo] = {}
        self.by_pid: dict[int, WorkerInfo] = {}
        self._spawning: dict[bytes, WorkerInfo] = {}
        self._starting: set[bytes] = set()  # asked for, neither registered nor exited yet
        self._extras_asked = False
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, name="zmesh-zygote", daemon=True)
        self._reader.start()

    def spawn(self, env: dict[str, str] | None = None) -> WorkerInfo:
        """Ask the fork server for a new worker (loop thread)."""
        worker_id = os.urandom(8)
        info = WorkerInfo(worker_id, env_key=tuple(sorted((env or {}).items())))
        self.by_id[worker_id] = info
        self._starting.add(worker_id)
        with self._lock:
            write_record(self._sock, {"op": "spawn", "id": worker_id, "env": env or {}})
        return info

    def settled(self, info: WorkerInfo) -> None:
        """`info` registered or exited (loop thread). Once no worker is starting for the
        first time (the node's first ones), the fork server imports numpy for the workers
        forked later: not before those first ones fork, nor while they start."""
        self._starting.discard(info.worker_id)
        if self._starting or self._extras_asked:
            return
        self._extras_asked = True
        with self._lock:
            try:
                write_record(self._sock, {"op": "extras"})
            except OSError:
                pass

    def kill(self, info: WorkerInfo, sig: int = 9) -> None:
        if info.pid:
            with self._lock:
                try:
                    write_record(self._sock, {"op": "kill", "pid": info.pid, "sig": sig})
                except OSError:
                    pass

    def _read(self) -> None:
        reader = RecordReader()
        while True:
            try:
                chunk = self._sock.recv(65536)
            except OSError:
                return
            if not chunk:
                return
            for rec in reader.feed(chunk):
                self._post(self._handle, rec)

    def _handle(self, rec: dict[str, Any]) -> None:
        if rec["op"] == "spawned":
            info = self.by_id.get(bytes(rec["id"]))
            if info is not None:
                info.pid = rec["pid"]
                self.by_pid[info.pid] = info
        elif rec["op"] == "exited":
            self._on_exit(rec["pid"], rec["status"])

    def close(self) -> None:
        """Stop the fork server; it kills and reaps every worker before it exits."""
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        try:  # our child, not yet reaped: its pid cannot have been reused
            os.kill(self.zygote_pid, zygote.STOP_SIGNAL)
        except ProcessLookupError:
            pass
        if not _wait_exit(self.zygote_pid, 10.0):
            try:
                os.kill(self.zygote_pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            _wait_exit(self.zygote_pid, None)


def _wait_exit(pid: int, timeout: float | None) -> bool:
    """Reap child `pid`, waiting up to `timeout` seconds for it to exit (pidfd, no polling)."""
    try:
        fd = os.pidfd_open(pid)
    except (ProcessLookupError, AttributeError, OSError):
        fd = -1
    try:
        if fd >= 0:
            ready, _, _ = select.select([fd], [], [], timeout)
            if not ready:
                return False
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass
    finally:
        if fd >= 0:
            os.close(fd)
    return True
