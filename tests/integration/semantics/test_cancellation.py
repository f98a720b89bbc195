"""Cancellation as Ray documents it ("Cancelling tasks", ray.cancel API reference)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from zmesh.exceptions import TaskCancelledError


@pytest.fixture
def gate(ray):
    @ray.remote(num_cpus=0, max_concurrency=8)
    class Gate:
        def __init__(self):
            self.ev = threading.Event()
            self.started = threading.Event()

        def wait(self):
            self.ev.wait(120)
            return "released"

        def mark(self):
            self.started.set()

        def wait_started(self):
            return self.started.wait(60)

        def open(self):
            self.ev.set()

    g = Gate.remote()
    yield g
    ray.get(g.open.remote(), timeout=30)
    ray.kill(g)


def test_cancel_interrupts_a_task_blocked_in_get(ray, gate):
    # docs (ray.cancel): "If the specified task is ... running, a KeyboardInterrupt / the
    # cancellation is raised in the task"; a task blocked in ray.get is interrupted too,
    # and get on its ref raises TaskCancelledError.
    @ray.remote(num_cpus=1)
    def blocked(g):
        ray.get(g.mark.remote())
        return ray.get(g.wait.remote())

    ref = blocked.remote(gate)
    assert ray.get(gate.wait_started.remote(), timeout=30)
    ray.cancel(ref)
    with pytest.raises(TaskCancelledError):
        ray.get(ref, timeout=30)


def test_cancel_interrupts_a_task_blocked_in_wait(ray, gate):
    @ray.remote(num_cpus=1)
    def blocked(g):
        ray.get(g.mark.remote())
        return ray.wait([g.wait.remote()])

    ref = blocked.remote(gate)
    assert ray.get(gate.wait_started.remote(), timeout=30)
    ray.cancel(ref)
    with pytest.raises(TaskCancelledError):
        ray.get(ref, timeout=30)


def test_recursive_cancel_cancels_the_tasks_it_submitted(ray, gate):
    # docs (ray.cancel, recursive=True by default): "cancel all child tasks"
    @ray.remote(num_cpus=0)
    def child(g):
        ray.get(g.mark.remote())
        return ray.get(g.wait.remote())

    @ray.remote(num_cpus=0)
    def parent(g):
        ref = child.remote(g)
        return [ref], ray.get(ref)

    ref = parent.remote(gate)
    assert ray.get(gate.wait_started.remote(), timeout=30)
    ray.cancel(ref)
    with pytest.raises(TaskCancelledError):
        ray.get(ref, timeout=30)
    # the child is cancelled too: once the gate opens nothing is left running to return it;
    # the proof is that a fresh task runs at once on the freed worker pool
    @ray.remote(num_cpus=0)
    def ok():
        return 1

    assert ray.get(ok.remote(), timeout=30) == 1



def _recording_actor(ray):
    """An actor that blocks on a gate (`block`) and records the calls that ran (`record`)."""

    @ray.remote
    class Seq:
        def __init__(self):
            self.ran = []

        def block(self, g):
            ray.get(g.mark.remote())
            ray.get(g.wait.remote())

        def record(self, x):
            self.ran.append(x)
            return x

        def ran_list(self):
            return self.ran

    return Seq

def test_queued_actor_task_is_cancelled_and_never_runs(ray, gate):
    # docs (Actor task cancellation): "if the specified task is pending execution, it is
    # cancelled and not executed"; force=True is not supported for actor tasks (ValueError).
    # Checked against Ray 2.60 (tools/ray_parity.py): Ray differs from its docs here (the call
    # after the cancelled one times out waiting for its sequence number); zmesh follows the docs.
    Seq = _recording_actor(ray)
    a = Seq.remote()
    first = a.block.remote(gate)
    assert ray.get(gate.wait_started.remote(), timeout=30)
    doomed = a.record.remote("doomed")
    kept = a.record.remote("kept")
    with pytest.raises(ValueError):
        ray.cancel(doomed, force=True)
    ray.cancel(doomed)
    ray.get(gate.open.remote(), timeout=30)
    ray.get(first, timeout=30)
    with pytest.raises(TaskCancelledError):
        ray.get(doomed, timeout=30)
    assert ray.get(kept, timeout=30) == "kept"
    assert ray.get(a.ran_list.remote(), timeout=30) == ["kept"]


def test_recursive_cancel_cancels_the_actor_tasks_it_submitted(ray, gate):
    # docs (Task cancellation: "ray.cancel(recursive=True) cancels all child and Actor
    # Tasks"): a queued actor call the cancelled task made is cancelled and never runs.
    # Checked against Ray 2.60 (tools/ray_parity.py): Ray answers TaskCancelledError too but
    # still runs the call it had pushed to the actor; zmesh follows the docs.
    Seq = _recording_actor(ray)
    @ray.remote(max_concurrency=2)
    class Keeper:
        def __init__(self):
            self.refs = []
            self.kept = threading.Event()

        def keep(self, refs):
            self.refs = refs
            self.kept.set()

        def get(self):
            self.kept.wait(60)
            return self.refs

    @ray.remote(num_cpus=0)
    def parent(a, keeper):
        child = a.record.remote("child")
        ray.get(keeper.keep.remote([child]))  # the driver learns the call was made
        return ray.get(child)

    a, keeper = Seq.remote(), Keeper.remote()
    first = a.block.remote(gate)
    assert ray.get(gate.wait_started.remote(), timeout=30)
    ref = parent.remote(a, keeper)
    children = ray.get(keeper.get.remote(), timeout=90)
    assert children, "the task never made its actor call"
    ray.cancel(ref)
    with pytest.raises(TaskCancelledError):
        ray.get(ref, timeout=30)
    ray.get(gate.open.remote(), timeout=30)
    ray.get(first, timeout=30)
    with pytest.raises(TaskCancelledError):
        ray.get(children[0], timeout=30)
    assert ray.get(a.ran_list.remote(), timeout=30) == []


def test_actor_task_cancelled_before_the_actor_is_up(ray, gate):
    # docs (Actor task cancellation, pending tasks): a call still queued at the caller
    # (the actor is starting) is cancelled; the calls after it still run in order
    @ray.remote
    class Slow:
        def __init__(self, v):
            self.v = v

        def get(self, x):
            return (self.v, x)

    a = Slow.remote(gate.wait.remote())  # not up until the gate opens
    doomed = a.get.remote(1)
    kept = a.get.remote(2)
    ray.cancel(doomed)
    ray.get(gate.open.remote(), timeout=30)
    with pytest.raises(TaskCancelledError):
        ray.get(doomed, timeout=30)
    assert ray.get(kept, timeout=30) == ("released", 2)


def test_running_async_actor_task_is_cancelled(ray):
    # docs (Actor task cancellation): "if it is an async actor, Ray cancels the
    # asyncio.Task"; the ref raises TaskCancelledError and the actor keeps serving.
    @ray.remote
    class Async:
        def __init__(self):
            self.started = asyncio.Event()

        async def long(self):
            self.started.set()
            await asyncio.sleep(120)
            return "finished"

        async def wait_started(self):
            await self.started.wait()
            return True

        async def ping(self):
            return "pong"

    a = Async.remote()
    ref = a.long.remote()
    assert ray.get(a.wait_started.remote(), timeout=30)
    ray.cancel(ref)
    with pytest.raises(TaskCancelledError):
        ray.get(ref, timeout=30)
    assert ray.get(a.ping.remote(), timeout=30) == "pong"


def test_queued_async_actor_task_is_cancelled_while_another_holds_the_only_slot(ray, gate):
    # docs (Actor task cancellation): a queued actor task is cancelled. A call queued for an
    # async actor's only slot used to be cancelled outside the part that answers: its
    # caller waited forever (reviewer's reproduction: GetTimeoutError after 20 s).
    @ray.remote(max_concurrency=1)
    class One:
        async def hold(self, g):
            await g.mark.remote()
            return await g.wait.remote()

        async def quick(self):
            return "quick"

    a = One.remote()
    held = a.hold.remote(gate)
    assert ray.get(gate.wait_started.remote(), timeout=30)
    queued = a.quick.remote()
    ray.cancel(queued)
    with pytest.raises(TaskCancelledError):
        ray.get(queued, timeout=30)
    ray.get(gate.open.remote(), timeout=30)
    assert ray.get(held, timeout=30) == "released"
    assert ray.get(a.quick.remote(), timeout=30) == "quick"


def test_running_sync_actor_task_is_not_interrupted(ray):
    # docs (Actor task cancellation): "If it is a regular actor or a threaded actor, the
    # execution isn't cancelled"
    @ray.remote(max_concurrency=2)
    class Worker:
        def __init__(self):
            self.ev = threading.Event()
            self.started = threading.Event()

        def work(self):
            self.started.set()
            self.ev.wait(60)
            return "done"

        def wait_started(self):
            return self.started.wait(60)

        def finish(self):
            self.ev.set()

    w = Worker.remote()
    ref = w.work.remote()
    assert ray.get(w.wait_started.remote(), timeout=30)
    ray.cancel(ref)
    ray.get(w.finish.remote(), timeout=30)
    assert ray.get(ref, timeout=30) == "done"


def test_cancel_during_argument_decoding_is_task_cancelled(ray, tmp_path):
    # docs (ray.cancel: the task raises TaskCancelledError); issue #13: a cancel that lands
    # while arguments are decoded must not surface as a serialization error.
    marker = tmp_path / "decoding"

    def slow_load(path):
        import time
        from pathlib import Path

        Path(path).write_text("started")
        end = time.monotonic() + 60
        while time.monotonic() < end:  # decoding that runs Python code for a long time
            time.sleep(0.01)
        return "loaded"

    class SlowToLoad:
        def __reduce__(self):
            return (slow_load, (str(marker),))

    @ray.remote(num_cpus=1)
    def use(x):
        return x

    ref = use.remote(SlowToLoad())
    from runtime_fixtures import wait_until

    assert wait_until(marker.exists, timeout=30)
    ray.cancel(ref)
    with pytest.raises(TaskCancelledError):
        ray.get(ref, timeout=30)
