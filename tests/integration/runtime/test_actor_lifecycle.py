"""Actor lifecycles: kill, restarts after a crash, retries of in-flight calls, `__init__`
failures and actors dying with their owner."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from runtime_fixtures import wait_until

import zmesh
from zmesh.exceptions import ActorDiedError, RayActorError


def _is_dead(handle, method="pid") -> bool:
    """True once a call to `handle` fails with ActorDiedError (death reaches callers
    asynchronously, so tests poll for it)."""
    try:
        zmesh.get(getattr(handle, method).remote(), timeout=10)
    except ActorDiedError:
        return True
    return False


def _sigkill_and_wait_gone(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    assert wait_until(lambda: not _alive(pid))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a killed child of the fork server may linger as a zombie until reaped
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):  # reaped meanwhile (the read: ESRCH)
        return False


@pytest.fixture
def marker(tmp_path):
    return str(tmp_path / "marker")


def test_kill_then_calls_raise_actor_died_naming_the_actor_and_why(ray):
    @ray.remote
    class Victim:
        def pid(self):
            return os.getpid()

    v = Victim.remote()
    pid = ray.get(v.pid.remote())
    ray.kill(v)
    with pytest.raises(ActorDiedError) as info:
        ray.get(v.pid.remote(), timeout=10)
    assert "Victim" in str(info.value)
    assert "kill" in str(info.value)
    assert isinstance(info.value, RayActorError)
    assert wait_until(lambda: not _alive(pid))


def test_kill_an_unready_actor_fails_its_queued_calls(ray):
    @ray.remote
    class Slow:
        def __init__(self):
            import time

            time.sleep(0.5)

        def ping(self):
            return "pong"

    s = Slow.remote()
    ref = s.ping.remote()
    ray.kill(s)
    with pytest.raises(ActorDiedError, match="Slow"):
        ray.get(ref, timeout=10)


def test_kill_rejects_something_that_is_not_an_actor(ray):
    with pytest.raises(ValueError, match="actor handles"):  # Ray: ValueError
        ray.kill("not an actor")


def test_kill_without_no_restart_restarts_with_fresh_state_and_new_pid(ray):
    @ray.remote(max_restarts=1)
    class Counter:
        def __init__(self):
            self.n = 0

        def incr(self):
            self.n += 1
            return self.n

        def pid(self):
            return os.getpid()

    c = Counter.remote()
    assert ray.get([c.incr.remote() for _ in range(3)]) == [1, 2, 3]
    old_pid = ray.get(c.pid.remote())
    ray.kill(c, no_restart=False)
    assert wait_until(lambda: not _alive(old_pid))
    assert ray.get(c.incr.remote(), timeout=20) == 1  # state reset by the restart
    assert ray.get(c.pid.remote()) != old_pid


def test_calls_across_a_restart_run_in_submission_order_on_the_new_incarnation(ray):
    @ray.remote
    def slow(x):
        import time

        time.sleep(0.3)  # keeps this argument unresolved while the actor restarts
        return x

    @ray.remote(max_restarts=1)
    class Log:
        def __init__(self):
            self.items = []

        def add(self, x):
            self.items.append(x)

        def items_(self):
            return self.items

        def pid(self):
            return os.getpid()

    log = Log.remote()
    old_pid = ray.get(log.pid.remote())
    ray.kill(log, no_restart=False)
    log.add.remote(slow.remote("first"))  # waits for its ref; later calls must wait for it
    for i in range(20):
        log.add.remote(i)
    assert ray.get(log.items_.remote(), timeout=30) == ["first", *range(20)]
    assert ray.get(log.pid.remote()) != old_pid


def test_kill_with_no_restart_ends_an_actor_that_could_restart(ray):
    @ray.remote(max_restarts=5)
    class Sturdy:
        def pid(self):
            return os.getpid()

    s = Sturdy.remote()
    ray.get(s.pid.remote())
    ray.kill(s)  # no_restart defaults to True
    with pytest.raises(ActorDiedError, match="kill"):
        ray.get(s.pid.remote(), timeout=10)


def test_sigkilled_actor_restarts_up_to_max_restarts_then_dies_saying_signal_9(ray):
    # a call made right after a SIGKILL can race the node's notice and reach the dead worker;
    # max_task_retries retries such calls on the next incarnation
    @ray.remote(max_restarts=2, max_task_retries=2)
    class Phoenix:
        def __init__(self):
            self.calls = 0

        def pid(self):
            self.calls += 1
            return os.getpid(), self.calls

    p = Phoenix.remote()
    seen = []
    for _ in range(3):  # the original worker and two restarts
        pid, calls = ray.get(p.pid.remote(), timeout=20)
        assert calls == 1  # every incarnation starts from __init__
        seen.append(pid)
        _sigkill_and_wait_gone(pid)
    assert len(set(seen)) == 3
    assert wait_until(lambda: _is_dead(p))
    with pytest.raises(ActorDiedError) as info:
        ray.get(p.pid.remote(), timeout=10)
    assert "Phoenix" in str(info.value)
    assert "killed by signal 9" in str(info.value)


def test_sigkilled_actor_without_max_restarts_dies_at_once(ray):
    @ray.remote
    class Mortal:
        def pid(self):
            return os.getpid()

    a = Mortal.remote()
    _sigkill_and_wait_gone(ray.get(a.pid.remote()))
    assert wait_until(lambda: _is_dead(a))
    with pytest.raises(ActorDiedError, match="signal 9"):
        ray.get(a.pid.remote(), timeout=10)


def _blocking_actor(ray, **options):
    @ray.remote(**options)
    class Blocker:
        def pid(self):
            return os.getpid()

        def block_first_time(self, marker):
            """Records each attempt; the first one blocks until its worker is killed."""
            import time

            with open(marker, "a") as f:
                f.write("x")
            with open(marker) as f:
                first = f.read() == "x"
            if first:
                time.sleep(60)  # stands in for long work; the test kills the worker meanwhile
            return "finished"

    return Blocker.remote()


def test_in_flight_call_is_retried_after_restart_with_max_task_retries(ray, marker):
    b = _blocking_actor(ray, max_restarts=1, max_task_retries=1)
    pid = ray.get(b.pid.remote(), timeout=20)
    ref = b.block_first_time.remote(marker)
    assert wait_until(lambda: os.path.exists(marker))
    _sigkill_and_wait_gone(pid)
    assert ray.get(ref, timeout=30) == "finished"
    assert Path(marker).read_text() == "xx"  # the first attempt plus one retry


def test_calls_in_flight_at_a_crash_are_retried_in_submission_order(ray, marker):
    @ray.remote(max_restarts=1, max_task_retries=-1)
    class Log:
        def __init__(self):
            self.items = []

        def pid(self):
            return os.getpid()

        def add(self, x, marker=None):
            import time

            if marker is not None and not os.path.exists(marker):
                open(marker, "w").close()
                time.sleep(60)  # stands in for long work; the test kills the worker meanwhile
            self.items.append(x)
            return list(self.items)

    log = Log.remote()
    pid = ray.get(log.pid.remote(), timeout=20)
    log.add.remote("blocked", marker)
    refs = [log.add.remote(i) for i in range(10)]  # queued behind the blocked call
    assert wait_until(lambda: os.path.exists(marker))
    _sigkill_and_wait_gone(pid)
    assert ray.get(refs[-1], timeout=30) == ["blocked", *range(10)]


def test_in_flight_call_without_retries_fails_clearly_while_the_actor_restarts(ray, marker):
    b = _blocking_actor(ray, max_restarts=1)
    pid = ray.get(b.pid.remote(), timeout=20)
    ref = b.block_first_time.remote(marker)
    assert wait_until(lambda: os.path.exists(marker))
    _sigkill_and_wait_gone(pid)
    with pytest.raises(RayActorError) as info:
        ray.get(ref, timeout=30)
    assert "Blocker" in str(info.value)
    assert "signal 9" in str(info.value)
    assert ray.get(b.pid.remote(), timeout=20) != pid  # the actor itself came back
    assert Path(marker).read_text() == "x"  # never retried


def test_in_flight_call_to_an_actor_that_cannot_restart_fails_with_actor_died(ray, marker):
    b = _blocking_actor(ray, max_task_retries=3)  # retries are moot without restarts
    pid = ray.get(b.pid.remote(), timeout=20)
    ref = b.block_first_time.remote(marker)
    assert wait_until(lambda: os.path.exists(marker))
    _sigkill_and_wait_gone(pid)
    with pytest.raises(ActorDiedError, match="signal 9"):
        ray.get(ref, timeout=30)


def test_init_failure_surfaces_on_first_call_as_users_error_and_actor_died(ray):
    class BadConfig(Exception):
        pass

    @ray.remote
    class Fragile:
        def __init__(self, setting):
            raise BadConfig(f"bad setting {setting}")

        def ping(self):
            return "pong"

    f = Fragile.remote("x")
    with pytest.raises(BadConfig) as info:
        ray.get(f.ping.remote(), timeout=20)
    assert isinstance(info.value, ActorDiedError)
    assert "bad setting x" in str(info.value)
    assert "Fragile" in str(info.value)
    with pytest.raises(ActorDiedError):  # later calls fail the same way
        ray.get(f.ping.remote(), timeout=10)


def test_init_failure_is_not_restarted_even_with_max_restarts(ray, marker):
    @ray.remote(max_restarts=3)
    class AlwaysFails:
        def __init__(self, marker):
            with open(marker, "a") as f:
                f.write("x")
            raise ValueError("no")

        def ping(self):
            return "pong"

    a = AlwaysFails.remote(marker)
    with pytest.raises(ValueError, match="no"):
        ray.get(a.ping.remote(), timeout=20)
    assert Path(marker).read_text() == "x"


def test_child_actor_dies_with_its_parent_actor(ray):
    @ray.remote
    class Child:
        def pid(self):
            return os.getpid()

    @ray.remote
    class Parent:
        def spawn(self):
            self.child = Child.remote()
            return self.child

    parent = Parent.remote()
    child = ray.get(parent.spawn.remote(), timeout=20)
    child_pid = ray.get(child.pid.remote(), timeout=20)
    ray.kill(parent)
    assert wait_until(lambda: _is_dead(child))
    with pytest.raises(ActorDiedError, match="owner"):
        ray.get(child.pid.remote(), timeout=10)
    assert wait_until(lambda: not _alive(child_pid))


def test_actor_created_by_a_crashing_task_dies_with_it(ray):
    @ray.remote
    class Orphan:
        def pid(self):
            return os.getpid()

    @ray.remote
    class Holder:
        def put(self, handle):
            self.handle = handle

        def get(self):
            return self.handle

    @ray.remote(max_retries=0)
    def create_then_crash(holder):
        a = Orphan.remote()
        ray.get(a.pid.remote())
        ray.get(holder.put.remote(a))
        os._exit(1)

    holder = Holder.remote()
    with pytest.raises(zmesh.exceptions.WorkerCrashedError):
        ray.get(create_then_crash.remote(holder), timeout=20)
    orphan = ray.get(holder.get.remote())
    assert wait_until(lambda: _is_dead(orphan))


def test_named_detached_actor_created_inside_an_actor_outlives_it(ray):
    @ray.remote
    class Keeper:
        def pid(self):
            return os.getpid()

    @ray.remote
    class Creator:
        def pid(self):
            return os.getpid()

        def make(self):
            self.k = Keeper.options(name="keeper-lifecycle", lifetime="detached").remote()
            return ray.get(self.k.pid.remote())

    creator = Creator.remote()
    keeper_pid = ray.get(creator.make.remote(), timeout=20)
    ray.kill(creator)
    assert wait_until(lambda: _is_dead(creator))
    keeper = ray.get_actor("keeper-lifecycle")
    assert ray.get(keeper.pid.remote(), timeout=10) == keeper_pid
    ray.kill(keeper)
