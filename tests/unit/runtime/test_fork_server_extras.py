"""The fork server imports numpy only after its first workers are forked; a node that closes
meanwhile stops that import (STOP_SIGNAL) rather than waiting ~50 ms for it, and the signal
is ignored at any other time."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import textwrap

from zmesh.runtime.node import zygote

DEADLINE_S = 60.0  # generous: a loaded CI host

# A child that plays the fork server's extras import with a "numpy" that never finishes
# importing (a finder that spins), so that only the stop signal can end it.
CHILD = textwrap.dedent("""
    import importlib.abc, importlib.machinery, signal, sys
    from zmesh.runtime.node import zygote

    class Spin(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, name, path, target=None):
            if name == "numpy":
                return importlib.machinery.ModuleSpec(name, self)
            return None
        def create_module(self, spec):
            return None
        def exec_module(self, module):
            print("importing", flush=True)
            try:
                while True:
                    pass
            except Exception:  # what some modules do: the stop must pass through it
                pass

    signal.signal(zygote.STOP_SIGNAL, signal.SIG_IGN)  # as zygote.main does
    sys.modules.pop("numpy", None)
    sys.meta_path.insert(0, Spin())
    try:
        zygote._import_extras()
        print("finished", flush=True)
    except zygote._Stopped:
        print("stopped", flush=True)
    sys.stdin.readline()  # a second stop signal now: ignored
    print("alive", flush=True)
""")


def _line(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], DEADLINE_S)
    assert ready, "no answer from the child in time"
    return proc.stdout.readline().strip()


def test_stop_signal_ends_the_extras_import_and_is_ignored_otherwise() -> None:
    proc = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert _line(proc) == "importing"
        os.kill(proc.pid, zygote.STOP_SIGNAL)
        assert _line(proc) == "stopped"
        os.kill(proc.pid, zygote.STOP_SIGNAL)
        assert proc.stdin is not None
        proc.stdin.write("go on\n")
        proc.stdin.flush()
        assert _line(proc) == "alive"
        assert proc.wait(DEADLINE_S) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()



def test_the_pool_asks_for_the_extras_once_its_first_workers_have_started() -> None:
    """Not before the workers asked for at the node's start have registered (or died), so
    that numpy's import competes with none of them, and only once."""
    import socket

    from zmesh.runtime.node import worker_pool
    from zmesh.runtime.node.zygote import RecordReader

    ours, fork_server_end = socket.socketpair()
    worker_pool._early = (os.getpid(), ours, "ipc:///nowhere")  # no fork server is forked
    pool = worker_pool.WorkerPool("ipc:///nowhere", "/nowhere", lambda *a: None,
                                  lambda *a: None)
    reader = RecordReader()
    fork_server_end.settimeout(DEADLINE_S)

    def ops() -> list[str]:
        fork_server_end.setblocking(False)
        try:
            chunk = fork_server_end.recv(65536)
        except BlockingIOError:
            chunk = b""
        finally:
            fork_server_end.setblocking(True)
        return [rec["op"] for rec in reader.feed(chunk)]

    try:
        first, second = pool.spawn(), pool.spawn()
        assert ops() == ["spawn", "spawn"]
        pool.settled(first)
        assert ops() == []  # the second still starts
        pool.settled(second)  # (registered or exited: the same to the pool)
        assert ops() == ["extras"]
        third = pool.spawn()
        pool.settled(third)
        assert ops() == ["spawn"]  # asked once only
    finally:
        ours.close()
        fork_server_end.close()
