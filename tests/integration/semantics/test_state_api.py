"""Ray's state API (`ray.util.state`: list/get/summarize of actors, nodes, placement groups
and tasks, with filters and limits) and `ray.timeline()`, as Ray's documentation shows them
("Ray State API", "ray.timeline"). Tasks appear once their worker reports them (about once a
second), so the tests wait for that event with a deadline.
"""

from __future__ import annotations

import json

import pytest
from runtime_fixtures import wait_until

from zmesh.util import state


def _finished(name: str, n: int = 1) -> bool:
    return len(state.list_tasks(filters=[("name", "=", name), ("state", "!=", "RUNNING")],
                                limit=1000)) >= n


def test_list_tasks_shows_finished_and_failed_tasks(ray):
    @ray.remote
    def good(x):
        return x

    @ray.remote
    def bad():
        raise ValueError("broken on purpose")

    ok_ref = good.remote(1)
    assert ray.get(ok_ref, timeout=30) == 1
    with pytest.raises(ValueError):
        ray.get(bad.remote(), timeout=30)
    assert wait_until(lambda: _finished("good") and _finished("bad"), timeout=30)

    failed = [r for r in state.list_tasks(filters=[("state", "=", "FAILED")], limit=1000)
              if r.name in ("good", "bad")]  # (the mesh is shared with other tests)
    assert [r.name for r in failed] == ["bad"]
    assert failed[0].error_type == "ValueError"
    assert "broken on purpose" in failed[0].error_message
    assert failed[0]["type"] == "NORMAL_TASK"  # rows read as dicts and as attributes

    row = state.get_task(ok_ref.task_id().hex())
    assert row is not None and row.state == "FINISHED" and row.name == "good"
    assert row.node_id == ray.get_runtime_context().get_node_id()
    assert row.end_time_ms >= row.start_time_ms > 0
    assert state.get_task("ab" * 16) is None

    summary = state.summarize_tasks()["cluster"]["summary"]
    assert summary["good"]["state_counts"] == {"FINISHED": 1}
    assert summary["bad"]["state_counts"] == {"FAILED": 1}


def test_a_running_task_is_listed_as_running_until_it_ends(ray):
    @ray.remote(num_cpus=0, max_concurrency=4)
    class Gate:
        def __init__(self):
            import threading

            self.open_ = threading.Event()

        def wait(self):
            return self.open_.wait(120)

        def open(self):
            self.open_.set()

    gate = Gate.remote()

    @ray.remote
    def held(g):
        return ray.get(g.wait.remote())

    ref = held.remote(gate)

    def running(name):
        return state.list_tasks(filters=[("name", "=", name), ("state", "=", "RUNNING")])

    assert wait_until(lambda: running("held") and running("Gate.wait"), timeout=30)
    row = running("held")[0]
    assert row.task_id == ref.task_id().hex() and row.end_time_ms is None
    assert row.type == "NORMAL_TASK" and running("Gate.wait")[0].type == "ACTOR_TASK"
    ray.get(gate.open.remote(), timeout=30)
    assert ray.get(ref, timeout=30) is True
    assert wait_until(lambda: not running("held") and _finished("held"), timeout=30)
    assert state.get_task(ref.task_id().hex()).state == "FINISHED"


def test_actor_calls_are_tasks_of_their_own_type(ray):
    @ray.remote
    class Echo:
        def echo(self, x):
            return x

    e = Echo.remote()
    assert ray.get([e.echo.remote(i) for i in range(3)], timeout=30) == [0, 1, 2]
    assert wait_until(lambda: _finished("Echo.echo", 3), timeout=30)
    calls = state.list_tasks(filters=[("name", "=", "Echo.echo")])
    assert len(calls) == 3 and {r.type for r in calls} == {"ACTOR_TASK"}


def test_timeline_returns_chrome_trace_events_or_writes_them(ray, tmp_path):
    @ray.remote
    def traced():
        return 7

    assert ray.get([traced.remote() for _ in range(3)], timeout=30) == [7, 7, 7]
    assert wait_until(lambda: _finished("traced", 3), timeout=30)
    events = ray.timeline()
    spans = [e for e in events if e.get("ph") == "X" and e["name"] == "traced"]
    assert len(spans) == 3 and all(e["dur"] >= 0 for e in spans)
    out = tmp_path / "trace.json"
    assert ray.timeline(filename=str(out)) is None
    written = json.loads(out.read_text())
    assert isinstance(written, list)
    assert len([e for e in written if e.get("name") == "traced"]) == 3


def test_list_nodes_and_placement_groups(ray):
    nodes = state.list_nodes()
    assert len(nodes) == 1 and nodes[0].state == "ALIVE"
    me = ray.get_runtime_context().get_node_id()
    assert nodes[0].node_id == me and nodes[0].resources_total["CPU"] >= 1
    assert state.get_node(me) == nodes[0]
    assert state.list_nodes(filters=[("state", "=", "dead")]) == []  # case-insensitive

    pg = ray.util.placement_group([{"CPU": 1}], strategy="PACK", name="grp")
    ray.get(pg.ready(), timeout=30)
    rows = state.list_placement_groups(filters=[("name", "=", "grp")])
    assert len(rows) == 1 and rows[0].state == "CREATED" and rows[0].strategy == "PACK"
    assert state.get_placement_group(rows[0].placement_group_id)["name"] == "grp"
    ray.util.remove_placement_group(pg)


def test_list_actors_filters_limits_and_summary(ray):
    @ray.remote(num_cpus=0)
    class Idle:
        def ping(self):
            return 1

    actors = [Idle.options(name=f"idle-{i}").remote() for i in range(3)]
    ray.get([a.ping.remote() for a in actors], timeout=30)
    alive = state.list_actors(filters=[("class_name", "=", "Idle"), ("state", "=", "ALIVE")])
    assert sorted(r.name for r in alive) == ["idle-0", "idle-1", "idle-2"]
    assert all(r.pid and r.node_id == ray.get_runtime_context().get_node_id() for r in alive)
    with pytest.warns(UserWarning, match="returning the first 2"):
        assert len(state.list_actors(filters=[("class_name", "=", "Idle")], limit=2)) == 2
    ray.kill(actors[0])
    assert wait_until(lambda: len(state.list_actors(
        filters=[("class_name", "=", "Idle"), ("state", "!=", "ALIVE")])) == 1, timeout=30)
    counts = state.summarize_actors()["cluster"]["summary"]["Idle"]["state_counts"]
    assert counts == {"ALIVE": 2, "DEAD": 1}


def test_bad_filters_and_limits_are_refused(ray):
    with pytest.raises(ValueError, match="predicate"):
        state.list_actors(filters=[("state", ">", "ALIVE")])
    with pytest.raises(ValueError, match="a filter is"):
        state.list_nodes(filters=[("state", "ALIVE")])
    with pytest.raises(ValueError, match="limit"):
        state.list_tasks(limit=-1)


def test_list_objects_and_workers(ray):
    import os

    import numpy as np

    big = ray.put(np.zeros(1 << 20, dtype=np.uint8))  # 1 MiB: in the node's store
    small = ray.put(1)  # inside this process: not in a store
    rows = state.list_objects(filters=[("object_id", "=", big.hex())])
    assert len(rows) == 1 and rows[0].object_size >= 1 << 20
    assert rows[0].node_id == ray.get_runtime_context().get_node_id()
    assert rows[0].state == "SEALED" and rows[0].is_primary_copy
    assert state.list_objects(filters=[("object_id", "=", small.hex())]) == []

    @ray.remote(num_cpus=0)
    class Resident:
        def pid(self):
            return os.getpid()

    a = Resident.remote()
    pid = ray.get(a.pid.remote(), timeout=30)
    drivers = state.list_workers(filters=[("worker_type", "=", "DRIVER")])
    assert os.getpid() in [d.pid for d in drivers]
    (row,) = state.list_workers(filters=[("pid", "=", pid)])
    assert row.worker_type == "WORKER" and row.state == "ACTOR" and row.is_alive
    assert row.actor_id == a._actor_id.hex()
    ray.kill(a)
