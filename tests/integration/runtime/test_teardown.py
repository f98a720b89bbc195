"""Nothing is left behind: shutdown, interpreter exit and a SIGKILLed driver all end every
zmesh process and remove the session and store directories; a starting node sweeps the store
directories of dead nodes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import psutil
import pytest
from runtime_fixtures import all_gone, wait_until

import zmesh
from zmesh.store.sweep import OWNER_FILE, default_store_root, ensure_store_root

DRIVER = textwrap.dedent("""
    import json, sys
    import numpy as np
    import zmesh

    info = zmesh.init(num_cpus=2)

    @zmesh.remote
    class Counter:
        def __init__(self):
            self.n = 0

        def incr(self):
            self.n += 1
            return self.n

    @zmesh.remote
    def forever():
        import time
        while True:
            time.sleep(0.05)

    counter = Counter.remote()
    assert zmesh.get(counter.incr.remote()) == 1
    running = forever.remote()
    big = zmesh.put(np.ones(4 << 20))
    zmesh.wait([running], timeout=0.2)
    print("READY " + json.dumps(info), flush=True)
    if sys.argv[1] == "hang":
        sys.stdin.read()
""")


def start_driver(mode: str) -> tuple[subprocess.Popen[str], dict[str, str]]:
    proc = subprocess.Popen([sys.executable, "-c", DRIVER, mode], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("READY "):
        proc.kill()
        proc.wait()
        pytest.fail(f"driver did not start: {line!r}")
    return proc, json.loads(line[len("READY "):])


def what_remains(procs: list[psutil.Process], info: dict[str, str]) -> list[str]:
    left = [f"pid {p.pid}" for p in procs if not all_gone([p])]
    store_dir = os.path.join(default_store_root(), info["node_id"])
    left += [d for d in (info["session_dir"], store_dir) if os.path.exists(d)]
    return left


def test_shutdown_after_tasks_actors_and_large_objects_leaves_nothing(no_zmesh_leaks):
    info = zmesh.init(num_cpus=2)

    @zmesh.remote
    class Box:
        def get(self, x):
            return x

    @zmesh.remote
    def total(a):
        return float(a.sum())

    box = Box.remote()
    ref = zmesh.put(np.ones(4 << 20))
    assert zmesh.get(total.remote(ref)) == 4 << 20
    assert zmesh.get(box.get.remote(5)) == 5
    assert os.path.isdir(os.path.join(default_store_root(), info["node_id"]))
    zmesh.shutdown()
    assert not zmesh.is_initialized()
    assert not os.path.exists(info["session_dir"])
    assert not os.path.exists(os.path.join(default_store_root(), info["node_id"]))


def test_init_twice_is_refused_unless_asked_and_init_after_shutdown_works(no_zmesh_leaks):
    zmesh.init(num_cpus=1)
    with pytest.raises(RuntimeError, match="already"):
        zmesh.init(num_cpus=1)
    assert zmesh.init(num_cpus=1, ignore_reinit_error=True)["node_id"]
    zmesh.shutdown()
    zmesh.shutdown()  # a second shutdown is a no-op
    zmesh.init(num_cpus=1)

    @zmesh.remote
    def one():
        return 1

    assert zmesh.get(one.remote()) == 1


def test_interpreter_exit_without_shutdown_leaves_nothing():
    proc, info = start_driver("exit")
    procs = psutil.Process(proc.pid).children(recursive=True) if proc.poll() is None else []
    assert proc.wait(30) == 0
    assert wait_until(lambda: not what_remains(procs, info)), what_remains(procs, info)


def test_a_sigkilled_driver_leaves_no_process_socket_or_object_file():
    proc, info = start_driver("hang")
    procs = psutil.Process(proc.pid).children(recursive=True)
    assert len(procs) >= 3  # node, fork server, workers
    assert os.path.isdir(info["session_dir"])
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert wait_until(lambda: not what_remains(procs, info)), what_remains(procs, info)


def test_a_starting_node_sweeps_the_store_directory_of_a_dead_node(no_zmesh_leaks, tmp_path):
    root = ensure_store_root(default_store_root())
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    dead_dir = os.path.join(root, f"dead-node-{os.getpid()}")
    live_dir = os.path.join(root, f"live-node-{os.getpid()}")
    for path, pid in ((dead_dir, dead.pid), (live_dir, os.getpid())):
        os.mkdir(path, mode=0o700)
        with open(os.path.join(path, OWNER_FILE), "w") as f:
            f.write(f"{pid} 0\n")
        with open(os.path.join(path, "segment-0"), "wb") as f:
            f.write(b"\0" * 4096)
    try:
        zmesh.init(num_cpus=1)
        assert not os.path.exists(dead_dir)
        assert os.path.exists(live_dir)  # its owner (this process) is alive
    finally:
        for path in (dead_dir, live_dir):
            if os.path.exists(path):
                for name in os.listdir(path):
                    os.unlink(os.path.join(path, name))
                os.rmdir(path)


def test_a_starting_driver_sweeps_session_dirs_left_by_dead_processes(tmp_path):
    import os
    import socket
    import time

    from zmesh.runtime.launcher import sweep_dead_sessions

    root = tmp_path
    dead = root / "session-dead"
    dead.mkdir()
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(dead / "driver-1.sock"))  # bound, then closed: nobody listens any more
    stale.close()
    live = root / "session-live"
    live.mkdir()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(live / "driver-2.sock"))
    listener.listen(1)
    young = root / "session-young"
    young.mkdir()
    old = time.time() - 3600
    for d in (dead, live):
        os.utime(d, (old, old))
    try:
        assert sweep_dead_sessions(str(root)) == [str(dead)]
        assert not dead.exists() and live.exists() and young.exists()
    finally:
        listener.close()


def test_workers_never_outlive_their_fork_server(no_zmesh_leaks):
    import os
    import signal

    import psutil
    from runtime_fixtures import wait_until

    import zmesh

    zmesh.init(num_cpus=2)

    @zmesh.remote
    def pid():
        return os.getpid()

    worker = psutil.Process(zmesh.get(pid.remote()))
    fork_server = worker.parent()
    assert fork_server is not None
    os.kill(fork_server.pid, signal.SIGKILL)
    assert wait_until(lambda: not worker.is_running() or
                      worker.status() == psutil.STATUS_ZOMBIE, timeout=10)
    zmesh.shutdown()


def test_a_driver_that_fails_while_its_node_starts_leaves_no_node_behind(tmp_path):
    from zmesh.runtime.launcher import start_node

    seen: list[psutil.Process] = []

    def fail() -> None:
        seen.extend(psutil.Process().children())
        raise RuntimeError("the client's import failed")

    with pytest.raises(RuntimeError, match="the client's import failed"):
        start_node(num_cpus=1, num_gpus=0, resources={}, object_store_memory=0,
                   while_starting=fail)
    assert seen, "no node process was started"
    assert wait_until(lambda: all_gone(seen)), "the node outlived the failed start"


def test_a_runtime_started_on_a_thread_outlives_the_thread(no_zmesh_leaks):
    """init() on a thread that then ends (a pool's, a request handler's) keeps its runtime:
    the kernel's parent-death signal follows the thread that started the node, not the
    driver process, so it must not stop a node whose driver still runs."""
    import threading

    tids: list[int] = []

    def start() -> None:
        tids.append(threading.get_native_id())
        zmesh.init(num_cpus=1)

    thread = threading.Thread(target=start)
    thread.start()
    thread.join(120)
    assert zmesh.is_initialized()
    # the signal goes out as the thread's task exits, before its /proc entry is gone
    assert wait_until(lambda: not os.path.exists(f"/proc/self/task/{tids[0]}"), timeout=30)

    @zmesh.remote
    def add_one(x: int) -> int:
        return x + 1

    assert zmesh.get(add_one.remote(1), timeout=60) == 2
    assert zmesh.api._state["proc"].poll() is None, "the node stopped"
    zmesh.shutdown()


def test_an_init_whose_client_cannot_be_made_leaves_no_node_behind(monkeypatch):
    """init() started its node, then making the driver's client failed (no fds left, say):
    the node is stopped, not left to run until the driver exits."""
    import zmesh.runtime.owner.client as client_module

    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(client_module, "CoreClient", refuse)
    before = {p.pid for p in psutil.Process().children()}
    with pytest.raises(OSError, match="Too many open files"):
        zmesh.init(num_cpus=1)
    started = [p for p in psutil.Process().children() if p.pid not in before]
    assert not zmesh.is_initialized()
    assert wait_until(lambda: all_gone(started)), "the node outlived the failed init"


def test_threads_that_start_the_runtime_together_announce_it_once():
    """Ray's auto-init line comes once, however many threads find no runtime at once."""
    code = textwrap.dedent("""
        import threading, zmesh
        barrier = threading.Barrier(4)
        def use():
            barrier.wait()
            zmesh.get(zmesh.put(1))
        threads = [threading.Thread(target=use) for _ in range(4)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        zmesh.shutdown()
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stderr.count("zmesh.init() was called automatically") == 1, out.stderr


def test_init_whose_node_fails_to_start_closes_the_client_it_made_meanwhile(no_zmesh_leaks):
    """init() makes its client while its node starts: a node that fails leaves neither a
    runtime nor that client's socket and zmq context behind."""
    import zmesh.runtime.owner.client  # noqa: F401  (imported before counting fds)
    from zmesh.errors import ZmeshError

    me = psutil.Process()
    fds = me.num_fds()
    with pytest.raises(ZmeshError, match="failed to start"):
        zmesh.init(num_cpus=1, resources={"disk": "a lot"})  # the node refuses the resources
    assert not zmesh.is_initialized()
    assert me.num_fds() == fds
