"""A driver that dies frees what it held on its node: over tcp (no pid to watch: it stops
pinging) its leases and non-detached actors were held forever; over ipc its objects stayed
in the store and its pipelined tasks kept running."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator

import psutil
import pytest
from cli_helpers import start_node
from runtime_fixtures import wait_until

import zmesh

DRIVER = textwrap.dedent("""
    import os, sys, time
    import numpy as np
    import zmesh

    zmesh.init(address=sys.argv[1], token=sys.argv[3])

    @zmesh.remote(num_cpus=1)
    class Holder:
        def pid(self):
            return os.getpid()

    @zmesh.remote(num_cpus=1)
    def spin(i):
        print("RUNNING", os.getpid(), flush=True)
        while True:
            time.sleep(0.05)

    big = zmesh.put(np.ones(2 << 20))
    if sys.argv[2] == "actor":
        holder = Holder.remote()
        print("PID", zmesh.get(holder.pid.remote()), flush=True)
    else:
        running = [spin.remote(i) for i in range(8)]  # pipelined to one leased worker
    sys.stdin.read()
""")


@pytest.fixture
def node() -> Iterator[tuple[dict[str, str], str]]:
    tmp = tempfile.mkdtemp(prefix="zdd-")  # short: ipc socket paths have a length limit
    env = dict(os.environ, TMPDIR=tmp, ZMESH_PEER_TIMEOUT_S="5")
    proc, hostport = start_node(env, "--num-cpus", "2")
    assert proc.stdout is not None
    token = re.search(r"--token (\S+)", proc.stdout.readline())
    assert token, "zmesh node printed no join token"
    env["ZMESH_TEST_TOKEN"] = token.group(1)
    yield env, f"tcp://{hostport}"
    if zmesh.is_initialized():
        zmesh.shutdown()
    proc.send_signal(signal.SIGINT)
    proc.wait(60)
    shutil.rmtree(tmp, ignore_errors=True)


def start_driver(env: dict[str, str], address: str, mode: str, marker: str
                 ) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen([sys.executable, "-c", DRIVER, address, mode,
                             env["ZMESH_TEST_TOKEN"]], env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert marker in line, line  # a task's output comes prefixed with its name and pid
    return proc, int(line.split()[-1])


def store_objects() -> int:
    from zmesh.runtime import context

    return int(context.current_client().query("store")["num_objects"])


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_dead_tcp_driver_frees_its_actor_and_its_cpus(node):
    env, address = node
    driver, actor_pid = start_driver(env, address, "actor", "PID")  # tcp:// stays on tcp
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait()
    assert wait_until(lambda: gone(actor_pid), timeout=60), "the dead driver's actor lives on"
    zmesh.init(address=address, token=env["ZMESH_TEST_TOKEN"])

    @zmesh.remote(num_cpus=2)
    def both_cpus():
        return "ran"

    assert zmesh.get(both_cpus.remote(), timeout=60) == "ran"


def test_a_dead_ipc_driver_stops_its_tasks_and_frees_its_objects(node):
    env, address = node
    hostport = address[len("tcp://"):]  # host:port on this machine: the driver uses ipc
    driver, task_pid = start_driver(env, hostport, "tasks", "RUNNING")
    zmesh.init(address=hostport, token=env["ZMESH_TEST_TOKEN"])
    assert store_objects() >= 1
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait()
    assert wait_until(lambda: gone(task_pid), timeout=60), "the dead driver's task runs on"
    assert wait_until(lambda: store_objects() == 0, timeout=60), store_objects()

    @zmesh.remote(num_cpus=2)
    def both_cpus():
        return "ran"

    assert zmesh.get(both_cpus.remote(), timeout=60) == "ran"
