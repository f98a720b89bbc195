"""Fate sharing as Ray: what an actor owns dies with it."""

from __future__ import annotations

import os

import pytest
from runtime_fixtures import wait_until

from zmesh.exceptions import RayActorError


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_an_actors_child_actor_dies_with_it(ray):
    # docs (Fault tolerance, "Actor fate sharing": an actor's owner is the worker that
    # created it; when the owner dies, the actor dies too, unless detached)
    @ray.remote(num_cpus=0)
    class Child:
        def pid(self):
            return os.getpid()

    @ray.remote(num_cpus=0)
    class Parent:
        def __init__(self):
            self.child = Child.remote()

        def child_handle(self):
            return [self.child]

        def child_pid(self):
            return ray.get(self.child.pid.remote())

    p = Parent.remote()
    child_pid = ray.get(p.child_pid.remote(), timeout=30)
    [child] = ray.get(p.child_handle.remote(), timeout=30)
    ray.kill(p)
    assert wait_until(lambda: _gone(child_pid), timeout=30)
    with pytest.raises(RayActorError):
        ray.get(child.pid.remote(), timeout=30)


def test_a_detached_child_actor_survives_its_creator(ray):
    # docs (Actor lifetimes: lifetime="detached" actors are not fate-shared with their owner)
    @ray.remote(num_cpus=0)
    class Child:
        def pid(self):
            return os.getpid()

    @ray.remote(num_cpus=0)
    class Parent:
        def make(self):
            c = Child.options(name="semantics-detached-child", lifetime="detached").remote()
            return ray.get(c.pid.remote())

    p = Parent.remote()
    pid = ray.get(p.make.remote(), timeout=30)
    ray.kill(p)
    child = ray.get_actor("semantics-detached-child")
    assert ray.get(child.pid.remote(), timeout=30) == pid
    ray.kill(child)


def test_tasks_an_actor_submitted_are_cleaned_up_when_it_dies(ray, tmp_path):
    # docs (Fault tolerance, fate sharing: tasks owned by a dead worker are cancelled / their
    # workers are released): the long task the actor started does not keep running.
    marker = tmp_path / "task-pid"

    @ray.remote(num_cpus=1)
    def long_task(path):
        import time
        from pathlib import Path

        Path(path).write_text(str(os.getpid()))
        end = time.monotonic() + 120
        while time.monotonic() < end:
            time.sleep(0.05)
        return "finished"

    @ray.remote(num_cpus=0)
    class Owner:
        def start(self, path):
            self.ref = long_task.remote(path)
            return True

    o = Owner.remote()
    assert ray.get(o.start.remote(str(marker)), timeout=30)
    assert wait_until(marker.exists, timeout=30)
    task_pid = int(marker.read_text())
    ray.kill(o)
    assert wait_until(lambda: _gone(task_pid), timeout=60)
