"""Actor lifetime as Ray: exit_actor, __ray_terminate__, atexit on graceful exit, kill with
restart, names freed at once, fate sharing, constructor refs resolved by the runtime."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from runtime_fixtures import wait_until

import zmesh
from zmesh.exceptions import RayActorError


def _pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_exit_actor_ends_the_actor_and_fails_later_calls(ray):
    # checked against Ray 2.60 (tools/ray_parity.py, exit_actor_ends_the_actor);
    # docs (Terminating actors: "Manual termination within the actor",
    # ray.actor.exit_actor()): the call that exits errors, later calls raise RayActorError
    @ray.remote
    class Quitter:
        def pid(self):
            return os.getpid()

        def quit(self):
            zmesh.actor.exit_actor()

    a = Quitter.remote()
    pid = ray.get(a.pid.remote(), timeout=30)
    with pytest.raises(RayActorError):
        ray.get(a.quit.remote(), timeout=30)
    with pytest.raises(RayActorError):
        ray.get(a.pid.remote(), timeout=30)
    assert wait_until(lambda: _pid_gone(pid), timeout=30)


def test_calls_queued_behind_exit_actor_never_run(ray):
    # observed Ray 2.60 (tools/ray_parity.py, exit_actor_ends_the_actor): calls sent before
    # the exit took effect fail with RayActorError; none of them runs
    @ray.remote
    class Quitter:
        def pid(self):
            return os.getpid()

        def quit(self):
            zmesh.actor.exit_actor()

    a = Quitter.remote()
    ray.get(a.pid.remote(), timeout=30)
    bye = a.quit.remote()
    later = [a.pid.remote() for _ in range(5)]
    with pytest.raises(RayActorError):
        ray.get(bye, timeout=30)
    for ref in later:
        with pytest.raises(RayActorError):
            ray.get(ref, timeout=30)


def test_exit_actor_outside_an_actor_raises(ray):
    # ray source (exit_actor): "exit_actor API is called on a non-actor worker" TypeError
    with pytest.raises(TypeError):
        zmesh.actor.exit_actor()


def test_ray_terminate_runs_queued_calls_first_then_ends_the_actor(ray):
    # docs (Terminating actors: actor.__ray_terminate__.remote() "queues a termination task;
    # any atexit handlers installed in the actor will be run"): calls queued before it run.
    @ray.remote
    class Counter:
        def __init__(self):
            self.n = 0

        def bump(self):
            self.n += 1
            return self.n

        def pid(self):
            return os.getpid()

    a = Counter.remote()
    pid = ray.get(a.pid.remote(), timeout=30)
    refs = [a.bump.remote() for _ in range(5)]
    a.__ray_terminate__.remote()
    assert ray.get(refs, timeout=30) == [1, 2, 3, 4, 5]
    with pytest.raises(RayActorError):
        ray.get(a.bump.remote(), timeout=30)
    assert wait_until(lambda: _pid_gone(pid), timeout=30)


def test_atexit_handlers_run_on_graceful_exit(ray, tmp_path):
    # docs (Terminating actors): exit_actor / __ray_terminate__ run the actor's atexit
    # handlers; kill does not.
    @ray.remote
    class WithAtexit:
        def __init__(self, path):
            import atexit

            atexit.register(lambda: Path(path).write_text("bye"))

        def quit(self):
            zmesh.actor.exit_actor()

        def ping(self):
            return 1

    marker = tmp_path / "exit.txt"
    a = WithAtexit.remote(str(marker))
    with pytest.raises(RayActorError):
        ray.get(a.quit.remote(), timeout=30)
    assert wait_until(marker.exists, timeout=30)

    marker2 = tmp_path / "terminate.txt"
    b = WithAtexit.remote(str(marker2))
    ray.get(b.ping.remote(), timeout=30)
    b.__ray_terminate__.remote()
    assert wait_until(marker2.exists, timeout=30)

    marker3 = tmp_path / "kill.txt"
    c = WithAtexit.remote(str(marker3))
    ray.get(c.ping.remote(), timeout=30)
    ray.kill(c)
    with pytest.raises(RayActorError):
        ray.get(c.ping.remote(), timeout=30)
    assert not marker3.exists()


def test_exit_actor_is_not_restarted(ray):
    # docs (exit_actor): "the actor will not be restarted" even with max_restarts left
    @ray.remote(max_restarts=3)
    class Quitter:
        def quit(self):
            zmesh.actor.exit_actor()

        def ping(self):
            return 1

    a = Quitter.remote()
    ray.get(a.ping.remote(), timeout=30)
    with pytest.raises(RayActorError):
        ray.get(a.quit.remote(), timeout=30)
    with pytest.raises(RayActorError):
        ray.get(a.ping.remote(), timeout=30)


def test_kill_without_no_restart_restarts_an_actor_with_restarts_left(ray):
    # docs (ray.kill: "no_restart: Whether or not this actor should be restarted if it's a
    # restartable actor"): kill(no_restart=False) gives a fresh instance
    @ray.remote(max_restarts=1)
    class Counter:
        def __init__(self):
            self.n = 0

        def bump(self):
            self.n += 1
            return self.n, os.getpid()

    a = Counter.remote()
    n, pid = ray.get(a.bump.remote(), timeout=30)
    assert n == 1
    ray.kill(a, no_restart=False)
    assert wait_until(lambda: _pid_gone(pid), timeout=30)

    def restarted():
        try:
            return ray.get(a.bump.remote(), timeout=30)[1] != pid
        except RayActorError:
            return False

    assert wait_until(restarted, timeout=60)


def test_a_killed_actors_name_is_free_at_once(ray):
    # observed Ray behaviour (test_actor_advanced: test_kill_then_get_actor /
    # reuse of a name after kill): get_actor raises right after kill, and the name can be
    # taken again.
    @ray.remote
    class Named:
        def ping(self):
            return os.getpid()

    a = Named.options(name="semantics-free-name").remote()
    ray.get(a.ping.remote(), timeout=30)
    ray.kill(a)
    with pytest.raises(ValueError):
        ray.get_actor("semantics-free-name")
    b = Named.options(name="semantics-free-name").remote()
    assert ray.get(b.ping.remote(), timeout=30)
    ray.kill(b)


def test_constructor_ref_arguments_do_not_block_remote(ray):
    # docs (Passing object refs: top-level ref arguments are resolved before the task or
    # actor runs); observed Ray behaviour: Actor.remote(ref) returns at once even if the ref
    # is not ready, and the constructor gets the value.
    @ray.remote
    class Gate:
        def __init__(self):
            self.ev = threading.Event()

        def wait(self):
            self.ev.wait(60)
            return 42

        def open(self):
            self.ev.set()

    @ray.remote
    class Holder:
        def __init__(self, value):
            self.value = value

        def get(self):
            return self.value

    gate = Gate.options(max_concurrency=2).remote()
    pending = gate.wait.remote()
    done = threading.Event()
    made = []

    def create():
        made.append(Holder.remote(pending))
        done.set()

    t = threading.Thread(target=create, daemon=True)
    t.start()
    assert done.wait(10), "Holder.remote(ref) blocked on the ref"
    ray.get(gate.open.remote(), timeout=30)
    assert ray.get(made[0].get.remote(), timeout=30) == 42


def test_constructor_ref_argument_that_failed_fails_the_actor(ray):
    # observed Ray behaviour: a failed ref argument makes actor creation fail; its calls
    # raise (an ActorDiedError, or the original error as Ray's RayTaskError does)
    @ray.remote(num_cpus=0)
    def broken():
        raise ValueError("no value")

    @ray.remote
    class Holder:
        def __init__(self, value):
            self.value = value

        def get(self):
            return self.value

    h = Holder.remote(broken.remote())
    with pytest.raises((RayActorError, ValueError)):
        ray.get(h.get.remote(), timeout=30)



def _gate_and_echo(ray):
    """A gate whose `wait` blocks until `open`, and a threaded echo actor (defined per test,
    so that they travel by value)."""

    @ray.remote
    class Gate:
        def __init__(self):
            self.ev = threading.Event()

        def wait(self):
            self.ev.wait(60)
            return "late"

        def open(self):
            self.ev.set()

    @ray.remote(max_concurrency=4)
    class Echo:
        def echo(self, x):
            return x

    return Gate, Echo


def _ready_call_overtook_the_blocked_one(ray, e, gate, blocked):
    """A ready call to `e` answers while `blocked` still waits for the gate; then it ends."""
    assert ray.get(e.echo.remote("ready"), timeout=30) == "ready"
    ready, _ = ray.wait([blocked], timeout=0)
    assert not ready
    ray.get(gate.open.remote(), timeout=30)
    assert ray.get(blocked, timeout=30) == "late"

def test_threaded_actor_call_with_unready_argument_does_not_hold_up_others(ray):
    # checked against Ray 2.60 (tools/ray_parity.py, threaded_actor_ready_call_overtakes_...);
    # observed Ray behaviour (threaded actors, max_concurrency > 1): a call waiting for its
    # argument does not stop later calls that are ready from running.
    Gate, Echo = _gate_and_echo(ray)
    gate = Gate.options(max_concurrency=2).remote()
    e = Echo.remote()
    blocked = e.echo.remote(gate.wait.remote())
    _ready_call_overtook_the_blocked_one(ray, e, gate, blocked)


def test_ready_calls_overtake_unready_ones_through_a_handle_got_by_name(ray):
    # observed Ray behaviour, as above, through a handle from get_actor (Ray's named handle
    # keeps the creation's fields)
    Gate, Echo = _gate_and_echo(ray)
    gate = Gate.options(max_concurrency=2).remote()
    keep = Echo.options(name="echo-by-name").remote()  # noqa: F841 (a handle keeps it alive)
    e = ray.get_actor("echo-by-name")
    blocked = e.echo.remote(gate.wait.remote())
    _ready_call_overtook_the_blocked_one(ray, e, gate, blocked)
    ray.kill(e)
