"""Actor method options as Ray takes them: `@ray.method(...)` and `handle.method.options(...)`
with `max_task_retries` and `retry_exceptions`, and handles got by name that know the class's
methods (num_returns) and the actor's max_task_retries.

Where each expectation comes from: Ray's documentation ("docs": Actor fault tolerance; the
ray.method API reference) or Ray 2.60's source ("ray source": ray/actor.py `method`,
`ActorMethod._remote`).
"""

from __future__ import annotations

import os

import pytest


# (classes and helpers the actors use are made inside each test: workers cannot import this
# module, and cloudpickle sends what a test defines by value)
def _flaky_class() -> type:
    class Flaky(Exception):
        pass

    return Flaky


def _crash_once_fn():  # type: ignore[no-untyped-def]
    def crash_once(path):
        """Kill this process the first time (the marker file is not there yet)."""
        if not os.path.exists(path):
            open(path, "w").close()
            os._exit(1)
        return os.getpid()

    return crash_once


def test_handle_by_name_knows_the_methods_num_returns(ray):
    # ray source: a handle from get_actor carries the class's method metadata, so a method
    # declared with num_returns=2 gives two refs however the handle was got.
    @ray.remote
    class Pair:
        @ray.method(num_returns=2)
        def two(self):
            return 1, 2

        def one(self):
            return 3

    created = Pair.options(name="pair").remote()
    by_name = ray.get_actor("pair")
    x, y = by_name.two.remote()
    assert ray.get([x, y], timeout=30) == [1, 2]
    assert ray.get(by_name.one.remote(), timeout=30) == 3
    with pytest.raises(AttributeError, match="no method 'nope'"):
        by_name.nope.remote()
    ray.kill(created)


def test_handle_by_name_keeps_the_actors_max_task_retries(ray, tmp_path):
    # docs (Actor fault tolerance): max_task_retries is the actor's; a call through any
    # handle in flight when the actor dies is retried on the restarted actor.
    crash = _crash_once_fn()

    @ray.remote(max_restarts=1, max_task_retries=1)
    class Crashy:
        def crash_once(self, path):
            return crash(path)

    created = Crashy.options(name="crashy").remote()  # (the creator's handle keeps it)

    @ray.remote
    def call_by_name(path):  # another process, which knows the actor only by its name
        return ray.get(ray.get_actor("crashy").crash_once.remote(path), timeout=60)

    pid = ray.get(call_by_name.remote(str(tmp_path / "died")), timeout=90)
    assert pid != os.getpid() and (tmp_path / "died").exists()
    ray.kill(created)


def test_method_retry_exceptions_sends_the_call_again(ray):
    # docs (ray.method: retry_exceptions, max_task_retries): an exception the method's
    # retry_exceptions covers runs the call again, up to max_task_retries times.
    Flaky = _flaky_class()

    @ray.remote
    class Counter:
        def __init__(self):
            self.calls = 0

        @ray.method(max_task_retries=3, retry_exceptions=[Flaky])
        def flaky(self, fail_times):
            self.calls += 1
            if self.calls <= fail_times:
                raise Flaky(f"attempt {self.calls}")
            return self.calls

        @ray.method(max_task_retries=3, retry_exceptions=[Flaky])
        def wrong_kind(self):
            self.calls += 1
            raise ValueError("not covered")

        def count(self):
            return self.calls

    c = Counter.remote()
    assert ray.get(c.flaky.remote(2), timeout=30) == 3  # two failures, then success
    with pytest.raises(ValueError, match="not covered"):
        ray.get(c.wrong_kind.remote(), timeout=30)  # not retried
    assert ray.get(c.count.remote(), timeout=30) == 4

    c2 = Counter.remote()
    with pytest.raises(Flaky, match="attempt 4"):  # 1 + 3 retries, then the error stays
        ray.get(c2.flaky.remote(10), timeout=30)
    assert ray.get(c2.count.remote(), timeout=30) == 4


def test_call_options_override_the_retries(ray, tmp_path):
    # ray source (ActorMethod._remote): max_task_retries and retry_exceptions given to
    # .options() apply to that call only, over the method's and the actor's.
    Flaky = _flaky_class()
    crash = _crash_once_fn()

    @ray.remote(max_restarts=2, max_task_retries=2)
    class Worker:
        def __init__(self):
            self.calls = 0

        def crash_once(self, path):
            return crash(path)

        def flaky(self):
            self.calls += 1
            if self.calls == 1:
                raise Flaky("first")
            return self.calls

    w = Worker.remote()
    with pytest.raises(ray.exceptions.RayActorError):  # no retry for this call: it fails
        ray.get(w.crash_once.options(max_task_retries=0).remote(str(tmp_path / "a")),
                timeout=60)
    # the actor restarted; without retry_exceptions an exception is the answer
    with pytest.raises(Flaky):
        ray.get(w.flaky.remote(), timeout=60)
    w2 = Worker.remote()
    assert ray.get(w2.flaky.options(retry_exceptions=True).remote(), timeout=60) == 2
    with pytest.raises(ValueError, match="max_task_retries"):
        w2.flaky.options(max_task_retries=-2)
    with pytest.raises(TypeError, match="retry_exceptions"):
        w2.flaky.options(retry_exceptions="Flaky")
    with pytest.raises(ValueError, match="invalid option"):
        w2.flaky.options(max_retries=1)  # a task option, not an actor call's


def test_ray_method_is_checked_and_may_be_bare(ray):
    # ray source (ray.method): only its valid kwargs are accepted; bare @ray.method works.
    with pytest.raises(ValueError, match="retries_max"):
        ray.method(retries_max=1)
    with pytest.raises(ValueError, match="max_task_retries"):
        ray.method(max_task_retries="3")

    @ray.remote
    class Plain:
        @ray.method
        def f(self):
            return "bare"

        @ray.method(enable_task_events=False)
        def g(self):
            return "events"

    p = Plain.remote()
    assert ray.get([p.f.remote(), p.g.remote()], timeout=30) == ["bare", "events"]
