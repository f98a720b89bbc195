"""The CLI tells the truth when something is wrong: one line naming the cause and the fix,
never a traceback, a silent fallback or a 30-second wait (issue: operating a mesh)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator

import pytest
from cli_helpers import free_port, start_node, zmesh_cli

from zmesh.security.keys import ClusterCredentials


@pytest.fixture
def env() -> Iterator[dict[str, str]]:
    """A private session root, so `zmesh stop` and `status` see only this test's nodes (short:
    workers' unix socket paths must stay under 108 bytes)."""
    root = tempfile.mkdtemp(prefix="zc-", dir="/tmp")
    try:
        yield dict(os.environ, TMPDIR=root, ZMESH_LOG_LEVEL="INFO")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _stop(*procs: subprocess.Popen[str]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(15)



def test_an_abbreviated_flag_is_an_error_not_a_guess(env: dict[str, str]) -> None:
    out = zmesh_cli(env, "node", "--num-cpu", "2")
    assert out.returncode == 2
    assert "unrecognized arguments: --num-cpu" in out.stderr


def test_a_port_in_use_is_one_line_naming_the_port_and_the_fix(env: dict[str, str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = zmesh_cli(env, "node", "--port", str(port))
    assert out.returncode != 0
    assert "Traceback" not in out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, out.stderr
    assert f"port {port}" in lines[0] and "already in use" in lines[0] and "--port" in lines[0]


def test_joining_a_dead_seed_fails_instead_of_running_alone(env: dict[str, str]) -> None:
    dead = free_port()
    token = ClusterCredentials.generate().token  # a well-formed token for a mesh that is gone
    out = subprocess.run([sys.executable, "-m", "zmesh", "node", "--num-cpus", "1",
                          "--join", f"127.0.0.1:{dead}", "--token", token],
                         env=dict(env, ZMESH_JOIN_TIMEOUT_S="1.5"), text=True,
                         capture_output=True, timeout=60)
    assert out.returncode != 0
    assert f"no zmesh node answered at 127.0.0.1:{dead}" in out.stderr
    assert "Traceback" not in out.stderr


def test_init_to_a_wrong_port_fails_at_once_with_the_reason(env: dict[str, str]) -> None:
    code = textwrap.dedent(f"""
        import time, zmesh
        t = time.monotonic()
        try:
            zmesh.init(address="127.0.0.1:{free_port()}")
        except ConnectionError as exc:
            print("ERR", round(time.monotonic() - t, 1), exc)
    """)
    out = subprocess.run([sys.executable, "-c", code], env=env, text=True,
                         capture_output=True, timeout=60)
    assert out.stdout.startswith("ERR"), out.stdout + out.stderr
    _, seconds, *words = out.stdout.split()
    assert "connection refused" in " ".join(words)
    assert float(seconds) < 10  # not the 30 s registration timeout


def test_node_logs_members_and_prints_no_internal_line(env: dict[str, str]) -> None:
    first = subprocess.Popen([sys.executable, "-m", "zmesh", "node", "--num-cpus", "1"],
                             env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert first.stdout is not None and first.stderr is not None
        announce = first.stdout.readline()
        assert "ZMESH-NODE-READY" not in announce and " is up at " in announce
        hostport = announce.split(" is up at ")[1].split()[0]
        second, _ = start_node(env, "--join", hostport)
        try:
            line = first.stderr.readline()  # blocks until the node logs something
            while "joined the mesh" not in line:
                assert line, "the node's log ended before the join was logged"
                line = first.stderr.readline()
            assert "127.0.0.1" in line
            second.terminate()
            line = first.stderr.readline()
            # a graceful leave is announced; if that message is lost the probes find it dead
            while "left the mesh" not in line and "declared dead" not in line:
                assert line, "the node's log ended before the departure was logged"
                line = first.stderr.readline()
        finally:
            _stop(second)
    finally:
        _stop(first)


def test_stop_spares_the_private_nodes_of_running_scripts(env: dict[str, str]) -> None:
    script = textwrap.dedent("""
        import sys, zmesh
        zmesh.init(num_cpus=1)
        @zmesh.remote
        def one():
            return 1
        print("up", flush=True)
        sys.stdin.readline()             # the test runs `zmesh stop` now
        print(zmesh.get(one.remote(), timeout=60), flush=True)
        zmesh.shutdown()
    """)
    driver = subprocess.Popen([sys.executable, "-c", script], env=env, text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    node, _ = start_node(env)
    try:
        assert driver.stdout is not None and driver.stdin is not None
        assert driver.stdout.readline().strip() == "up"
        stop = zmesh_cli(env, "stop")
        assert "stopped 1 zmesh node" in stop.stdout, stop.stdout + stop.stderr
        assert node.wait(15) == 0
        driver.stdin.write("go\n")
        driver.stdin.flush()
        assert driver.stdout.readline().strip() == "1"  # its private node still serves it
        assert driver.wait(30) == 0
    finally:
        _stop(driver, node)


def test_status_with_pending_work_lists_each_actor_once(env: dict[str, str]) -> None:
    head, hostport = start_node(env, "--num-cpus", "1")
    other, _ = start_node(env, "--join", hostport, "--num-cpus", "1")
    script = textwrap.dedent(f"""
        import sys, zmesh
        zmesh.init(address="{hostport}")
        @zmesh.remote(num_cpus=1)
        class Holder:
            def ping(self):
                return "pong"
        # two actors fill both nodes (one is forwarded), so later work must wait
        actors = [Holder.remote() for _ in range(2)]
        print(zmesh.get([a.ping.remote() for a in actors], timeout=60), flush=True)
        @zmesh.remote(num_gpus=1)
        def needs_a_gpu():
            return 0
        ref = needs_a_gpu.remote()      # infeasible: no node has a GPU
        print("submitted", flush=True)
        sys.stdin.readline()
    """)
    driver = subprocess.Popen([sys.executable, "-c", script], env=env, text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert driver.stdout is not None
        assert driver.stdout.readline().strip() == "['pong', 'pong']"
        assert driver.stdout.readline().strip() == "submitted"
        status = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # the infeasible task reaches a node's queue
            status = zmesh_cli(env, "status", "--address", hostport)
            assert status.returncode == 0, status.stderr
            if "infeasible" in status.stdout:
                break
        assert status is not None and "infeasible" in status.stdout, status.stdout
        assert "Traceback" not in status.stderr
        assert "Actors: 2" in status.stdout, status.stdout
        rows = json.loads(zmesh_cli(env, "list", "actors", "--format", "json",
                                    "--address", hostport).stdout)
        assert len(rows) == 2 and len({r["actor_id"] for r in rows}) == 2
        assert all(r["node_id"] for r in rows)  # the node that runs it, not a guess
    finally:
        _stop(driver, head, other)
