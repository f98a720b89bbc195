"""Named actors: lookup by name and namespace, get_if_exists, name conflicts, detached
lifetimes that outlive their creator, and named actors that die with their driver."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from runtime_fixtures import wait_until

import zmesh
from zmesh.exceptions import ActorDiedError


def _lookup_fails(ray, name: str, namespace: str | None = None) -> bool:
    try:
        ray.get_actor(name, namespace=namespace)
    except ValueError:
        return True
    return False


def test_get_actor_returns_a_handle_to_the_same_actor(ray):
    @ray.remote
    class Registry:
        def __init__(self):
            self.items = []

        def add(self, x):
            self.items.append(x)
            return list(self.items)

    r = Registry.options(name="registry-same").remote()
    r.add.remote("from creator")
    again = ray.get_actor("registry-same")
    assert again == r
    assert ray.get(again.add.remote("from lookup")) == ["from creator", "from lookup"]
    ray.kill(r)


def test_get_actor_works_inside_a_task_and_an_actor(ray):
    @ray.remote
    class Board:
        def __init__(self):
            self.n = 0

        def bump(self):
            self.n += 1
            return self.n

    @ray.remote
    def bump_by_name():
        return ray.get(ray.get_actor("board-shared").bump.remote())

    @ray.remote
    class Bumper:
        def bump(self):
            return ray.get(ray.get_actor("board-shared").bump.remote())

    board = Board.options(name="board-shared").remote()
    assert ray.get(bump_by_name.remote()) == 1
    assert ray.get(Bumper.remote().bump.remote()) == 2
    assert ray.get(board.bump.remote()) == 3
    ray.kill(board)


def test_missing_name_raises_value_error_naming_name_and_namespace(ray):
    with pytest.raises(ValueError, match="'nobody-here'.*'default'"):
        ray.get_actor("nobody-here")


def test_names_are_scoped_by_namespace(ray):
    @ray.remote
    class Tag:
        def __init__(self, tag):
            self.tag = tag

        def get(self):
            return self.tag

    a = Tag.options(name="tagged", namespace="ns-a").remote("a")
    b = Tag.options(name="tagged", namespace="ns-b").remote("b")  # same name, no conflict
    assert ray.get(ray.get_actor("tagged", namespace="ns-a").get.remote()) == "a"
    assert ray.get(ray.get_actor("tagged", namespace="ns-b").get.remote()) == "b"
    with pytest.raises(ValueError, match="tagged"):
        ray.get_actor("tagged")  # not in the driver's namespace
    ray.kill(a)
    ray.kill(b)


def test_creating_a_second_actor_with_a_taken_name_raises_value_error(ray):
    @ray.remote
    class Solo:
        def ping(self):
            return "pong"

    first = Solo.options(name="solo").remote()
    assert ray.get(first.ping.remote()) == "pong"
    with pytest.raises(ValueError, match="'solo' already exists"):
        Solo.options(name="solo").remote()
    assert ray.get(first.ping.remote()) == "pong"  # the first one is untouched
    ray.kill(first)


def test_get_if_exists_returns_the_live_actor_instead_of_creating_one(ray):
    @ray.remote
    class Counter:
        def __init__(self):
            self.n = 0

        def incr(self):
            self.n += 1
            return self.n

    first = Counter.options(name="counter-gie", get_if_exists=True).remote()
    assert ray.get(first.incr.remote()) == 1
    second = Counter.options(name="counter-gie", get_if_exists=True).remote()
    assert second == first
    assert ray.get(second.incr.remote()) == 2  # same state: no new actor was made
    ray.kill(first)


def test_a_name_is_free_again_once_its_actor_is_dead(ray):
    @ray.remote
    class Phase:
        def __init__(self, phase):
            self.phase = phase

        def get(self):
            return self.phase

    old = Phase.options(name="phase").remote(1)
    assert ray.get(old.get.remote()) == 1
    ray.kill(old)
    with pytest.raises(ActorDiedError):
        ray.get(old.get.remote(), timeout=10)
    assert wait_until(lambda: _lookup_fails(ray, "phase"))
    new = Phase.options(name="phase").remote(2)
    assert ray.get(ray.get_actor("phase").get.remote()) == 2
    ray.kill(new)


def test_detached_actor_created_by_a_task_survives_its_worker_dying(ray):
    @ray.remote
    class Keeper:
        def __init__(self):
            self.pid = os.getpid()

        def get_pid(self):
            return self.pid

    @ray.remote(max_retries=0)
    def create_detached_then_crash():
        k = Keeper.options(name="keeper-task", lifetime="detached").remote()
        ray.get(k.get_pid.remote())
        os._exit(1)

    with pytest.raises(zmesh.exceptions.WorkerCrashedError):
        ray.get(create_detached_then_crash.remote(), timeout=20)
    keeper = ray.get_actor("keeper-task")
    assert ray.get(keeper.get_pid.remote(), timeout=10) > 0
    ray.kill(keeper)


def test_bad_lifetime_is_refused(ray):
    @ray.remote
    class A:
        pass

    with pytest.raises(ValueError, match="lifetime"):
        A.options(lifetime="forever").remote()


SECOND_DRIVER = textwrap.dedent("""
    import sys

    import zmesh

    zmesh.init(address=sys.argv[1], namespace="second-driver")

    @zmesh.remote
    class Box:
        def __init__(self, value):
            self.value = value

        def get(self):
            return self.value

    @zmesh.remote
    def read_by_name(name):
        # tasks and actors run in their driver's namespace
        return zmesh.get(zmesh.get_actor(name).get.remote())

    @zmesh.remote
    class Finder:
        def read(self, name):
            return zmesh.get(zmesh.get_actor(name).get.remote())

    kept = Box.options(name="kept", lifetime="detached").remote("detached")
    temp = Box.options(name="temp").remote("plain")
    assert zmesh.get([kept.get.remote(), temp.get.remote()]) == ["detached", "plain"]
    assert zmesh.get(read_by_name.remote("temp")) == "plain"
    assert zmesh.get(Finder.remote().read.remote("temp")) == "plain"
    zmesh.shutdown()
    print("second driver done")
""")


def test_detached_actor_outlives_its_driver_and_a_plain_one_dies_with_it(ray):
    address = ray.nodes()[0]["IpcAddress"]
    done = subprocess.run([sys.executable, "-c", SECOND_DRIVER, address], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "second driver done" in done.stdout
    kept = ray.get_actor("kept", namespace="second-driver")
    assert ray.get(kept.get.remote(), timeout=10) == "detached"
    # the non-detached actor died with the driver that owned it, and gave up its name
    assert wait_until(lambda: _lookup_fails(ray, "temp", namespace="second-driver"))
    ray.kill(kept)
