"""`zmesh logs`, `zmesh timeline` and `zmesh memory` on a running mesh, as an operator runs
them while a driver works."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from cli_helpers import start_node, zmesh_cli

DRIVER = """
import sys, numpy as np, zmesh
zmesh.init(address="{hostport}", log_to_driver=False)

@zmesh.remote
def square(x):
    print("squaring", x, flush=True)
    return x * x

@zmesh.remote
class Greeter:
    def greet(self, who):
        print("hello from the actor to", who, flush=True)
        return who

g = Greeter.options(name="greeter").remote()
print(zmesh.get(g.greet.remote("ops")), zmesh.get(square.remote(7)), flush=True)
big = zmesh.put(np.zeros(2_000_000, dtype=np.uint8))   # 2 MB: in the store, not inline

@zmesh.remote(num_gpus=1)
def never():            # infeasible: no node has a GPU, so it never runs
    return 0

@zmesh.remote
def consume(arr, gate):
    return int(arr.sum())

waiting = consume.remote(big, never.remote())   # pending on `gate`: it holds `big` meanwhile
print("ready", flush=True)
sys.stdin.readline()
"""


@pytest.fixture
def mesh() -> Iterator[tuple[dict[str, str], str]]:
    """A `zmesh node` and a driver connected to it that has run a task and an actor call."""
    root = tempfile.mkdtemp(prefix="zo-", dir="/tmp")
    env = dict(os.environ, TMPDIR=root)
    node, hostport = start_node(env, "--num-cpus", "2")
    driver = subprocess.Popen([sys.executable, "-c", DRIVER.format(hostport=hostport)],
                              env=env, text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert driver.stdout is not None
        assert driver.stdout.readline().split() == ["ops", "49"]
        assert driver.stdout.readline().strip() == "ready"
        yield env, hostport
    finally:
        for p in (driver, node):
            if p.poll() is None:
                p.kill()
            p.wait(15)
        shutil.rmtree(root, ignore_errors=True)


def _until(check: Callable[[], Any], what: str, seconds: float = 30) -> Any:
    """Ask again until `check` returns something true (workers ship spans and log lines to
    their node asynchronously)."""
    deadline = time.monotonic() + seconds
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"gave up waiting for {what}"


def test_logs_of_a_named_actor_and_of_one_task(mesh: tuple[dict[str, str], str]) -> None:
    env, hostport = mesh

    def actor_logs() -> str:
        out = zmesh_cli(env, "logs", "--actor", "greeter", "--address", hostport)
        return out.stdout if "hello from the actor to ops" in out.stdout else ""

    text = _until(actor_logs, "the actor's line in its log")
    assert "squaring" not in text  # only the actor's worker
    assert "(Greeter pid=" in text

    trace = os.path.join(env["TMPDIR"], "t.json")

    def square_span() -> dict[str, Any] | None:
        zmesh_cli(env, "timeline", "--output", trace, "--address", hostport)
        with open(trace) as f:
            events = json.load(f)["traceEvents"]
        return next((e for e in events if e.get("name") == "square"), None)

    span = _until(square_span, "the task's span in the timeline")
    out = zmesh_cli(env, "logs", "--task", span["args"]["task_id"], "--address", hostport)
    assert "squaring 7" in out.stdout and "hello from the actor" not in out.stdout

    missing = zmesh_cli(env, "logs", "--actor", "nobody", "--address", hostport)
    assert missing.returncode == 1 and "no node has logs for actor nobody" in missing.stderr


def test_timeline_is_a_chrome_trace_of_tasks_and_actor_calls(
        mesh: tuple[dict[str, str], str]) -> None:
    env, hostport = mesh
    trace = os.path.join(env["TMPDIR"], "trace.json")

    def names() -> set[str]:
        out = zmesh_cli(env, "timeline", "--output", trace, "--address", hostport)
        assert out.returncode == 0, out.stderr
        with open(trace) as f:
            doc = json.load(f)
        got = {e["name"] for e in doc["traceEvents"] if e["ph"] == "X"}
        return got if {"square", "Greeter.greet"} <= got else set()

    _until(names, "both spans in the timeline")
    with open(trace) as f:
        doc = json.load(f)
    spans = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    for e in spans:
        assert e["dur"] >= 0 and e["ts"] > 0 and e["tid"] > 0
        assert e["cat"] in ("task", "actor_call")
    assert any(e["ph"] == "M" and e["name"] == "process_name" for e in doc["traceEvents"])


def test_memory_lists_the_put_object_with_its_owner_size_and_references(
        mesh: tuple[dict[str, str], str]) -> None:
    env, hostport = mesh
    out = zmesh_cli(env, "memory", "--format", "json", "--address", hostport)
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    big = [r for r in rows if (r["size"] or 0) >= 2_000_000]
    assert len(big) == 1, rows
    obj = big[0]
    assert obj["owner"] and [c["copy"] for c in obj["copies"]] == ["primary"]
    assert obj["copies"][0]["state"] == "sealed"
    # Ray's reference kinds: the driver's own variable, and the task waiting to be given it
    driver_refs = [r for r in obj["references"] if r["holder"].startswith("driver pid ")]
    assert len(driver_refs) == 1, obj
    assert {"LOCAL_REFERENCE", "USED_BY_PENDING_TASK"} <= set(driver_refs[0]["kinds"])
    table = zmesh_cli(env, "memory", "--address", hostport)
    assert "zmesh memory: " in table.stdout and obj["object_id"][:16] in table.stdout
    assert "LOCAL_REFERENCE+USED_BY_PENDING_TASK" in table.stdout
