"""Starting a private node for `zmesh.init()`: a child process that dies with the driver."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from zmesh.errors import ZmeshError
from zmesh.security.keys import TOKEN_ENV, process_credentials


def session_root() -> str:
    """A private directory for ipc sockets (mode 0700), one per user."""
    root = os.path.join(tempfile.gettempdir(), f"zmesh-{os.getuid()}")
    os.makedirs(root, mode=0o700, exist_ok=True)
    os.chmod(root, 0o700)
    return root


def new_session_dir() -> str:
    """A fresh session directory under the session root (which the last node out removes, so
    it may vanish between creating it and using it: try again)."""
    for _ in range(3):
        try:
            return tempfile.mkdtemp(prefix="session-", dir=session_root())
        except FileNotFoundError:
            continue
    return tempfile.mkdtemp(prefix="session-", dir=session_root())


def sweep_dead_sessions(root: str, *, min_age_s: float = 30.0) -> list[str]:
    """Remove session directories nobody uses any more: no live node in their node.json and
    only sockets nobody listens on (a driver killed with -9 leaves its socket behind)."""
    import time

    from zmesh.store.sweep import pid_alive
    from zmesh.transports.zmq_transport import ipc_socket_in_use

    removed = []
    for name in os.listdir(root):
        path = os.path.join(root, name)
        try:
            if not name.startswith("session-") or time.time() - os.stat(path).st_mtime < min_age_s:
                continue
            entries = os.listdir(path)
        except OSError:
            continue
        try:
            with open(os.path.join(path, "node.json")) as f:
                if pid_alive(int(json.load(f)["pid"])):
                    continue
        except (OSError, ValueError, KeyError, TypeError):
            pass
        if any(ipc_socket_in_use(os.path.join(path, e)) for e in entries if e != "node.json"):
            continue
        for entry in entries:
            try:
                os.unlink(os.path.join(path, entry))
            except OSError:
                pass
        try:
            os.rmdir(path)
            removed.append(path)
        except OSError:
            pass
    return removed


def node_ipc_address(session_dir: str) -> str:
    """Where the node of a private session takes its local clients (it binds it itself)."""
    return f"ipc://{os.path.join(session_dir, 'node.sock')}"


def start_node(*, num_cpus: float, num_gpus: float, resources: dict[str, float],
               object_store_memory: int, env_vars: dict[str, str] | None = None,
               while_starting: Callable[[], object] | None = None,
               session_dir: str | None = None,
               ) -> tuple[subprocess.Popen[bytes], str, str]:
    """Start a node process; returns (process, node address, session dir) once it is bound.

    The node process starts first; the sweep of dead sessions and `while_starting` (the
    driver makes its client) run while it starts, not before. If either raises, the node
    is stopped. `session_dir`: one from `new_session_dir` (default: a new one)."""
    session_dir = session_dir or new_session_dir()
    env = dict(os.environ)
    env.update(env_vars or {})
    creds = process_credentials()  # the private mesh's: this process's own
    if creds is not None:
        env[TOKEN_ENV] = creds.token
    env["ZMESH_LAZY_IMPORT"] = "1"  # the node needs its internals only: it starts faster
    cmd = [sys.executable, "-m", "zmesh.runtime.node.main", "--session-dir", session_dir,
           "--num-cpus", str(num_cpus), "--num-gpus", str(num_gpus),
           "--resources", json.dumps(resources), "--object-store-memory",
           str(object_store_memory), "--parent-pid", str(os.getpid())]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, env=env)
    assert proc.stdout is not None
    try:
        # while the node starts: sessions left by dead nodes (ours is too young to be swept)
        sweep_dead_sessions(session_root())
        if while_starting is not None:
            while_starting()
    except BaseException:
        proc.stdout.close()
        stop_node(proc, session_dir)
        raise
    line = proc.stdout.readline().decode()
    if not line.startswith("ZMESH-NODE-READY"):
        proc.kill()
        proc.wait()
        raise ZmeshError(f"the zmesh node failed to start (exit code {proc.poll()}): {line!r}")
    proc.stdout.close()
    address = line.split()[1]
    return proc, address, session_dir


def stop_node(proc: subprocess.Popen[bytes], session_dir: str, timeout: float = 10.0) -> None:
    """Ask the node to exit (SIGTERM), wait, and remove the session directory."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    # A node that was killed leaves its fork server and workers to notice (within a second
    # or so) and exit; one of them may still bind a socket here meanwhile: remove until gone.
    deadline = time.monotonic() + 5.0
    while True:
        shutil.rmtree(session_dir, ignore_errors=True)
        if not os.path.exists(session_dir) or time.monotonic() > deadline:
            break
        time.sleep(0.05)  # polling a directory: there is no event to wait on
    try:
        os.rmdir(os.path.dirname(session_dir))  # the last one out takes the shared root
    except OSError:
        pass
    # a node that was killed could not remove its object store: nobody else will until the
    # next node starts, so sweep stores whose owner is dead now
    from zmesh.store.sweep import sweep_dead_stores

    sweep_dead_stores()


def running_nodes() -> list[dict[str, Any]]:
    """The live nodes started on this machine by this user, from their node.json files."""
    root = session_root()
    found: list[dict[str, Any]] = []
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name, "node.json")
        try:
            with open(path) as f:
                info = json.load(f)
        except (OSError, ValueError):
            continue
        try:
            os.kill(int(info["pid"]), 0)
        except (ProcessLookupError, KeyError, ValueError, TypeError):
            continue
        except PermissionError:
            pass
        info["session_dir"] = os.path.join(root, name)
        found.append(info)
    return found
