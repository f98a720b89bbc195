"""Actors through the public API, as a Ray user writes them: state, ordering, concurrency,
handles passed around, actors creating actors, options, runtime context and resources."""

from __future__ import annotations

import os
import time

import pytest
from runtime_fixtures import wait_until

import zmesh


def test_counter_seed_program_increments_in_submission_order(ray):
    @ray.remote
    class Counter:
        def __init__(self):
            self.value = 0

        def increment(self):
            self.value += 1
            return self.value

        def get_value(self):
            return self.value

    counter = Counter.remote()
    future1 = counter.increment.remote()
    future2 = counter.increment.remote()
    future3 = counter.get_value.remote()
    assert ray.get([future1, future2]) == [1, 2]
    assert ray.get(future3) == 2


def test_counter_with_fire_and_forget_increments(ray):
    @ray.remote
    class Counter:
        def __init__(self):
            self.i = 0

        def get(self):
            return self.i

        def incr(self, value):
            self.i += value

    c = Counter.remote()
    for _ in range(10):
        c.incr.remote(1)
    assert ray.get(c.get.remote()) == 10


def test_accumulator_seed_program(ray):
    @ray.remote
    class Accumulator:
        def __init__(self):
            self.value = 0

        def add(self, x):
            self.value += x

        def get_value(self):
            return self.value

    accumulator = Accumulator.remote()
    assert ray.get(accumulator.get_value.remote()) == 0
    accumulator.add.remote(10)
    assert ray.get(accumulator.get_value.remote()) == 10


def test_calls_from_one_caller_run_in_submission_order_one_at_a_time(ray):
    @ray.remote
    class Recorder:
        def __init__(self):
            self.log = []
            self.active = 0
            self.max_active = 0

        def record(self, i):
            self.active += 1
            self.max_active = max(self.max_active, self.active)
            time.sleep(0.001)  # widen the window in which an overlapping call would show
            self.log.append(i)
            self.active -= 1

        def summary(self):
            return self.log, self.max_active

    r = Recorder.remote()
    for i in range(200):
        r.record.remote(i)
    log, max_active = ray.get(r.summary.remote())
    assert log == list(range(200))
    assert max_active == 1


def test_ref_arguments_do_not_reorder_calls_from_one_caller(ray):
    @ray.remote
    def slow_value(x):
        time.sleep(0.2)
        return x

    @ray.remote
    class Log:
        def __init__(self):
            self.items = []

        def add(self, x):
            self.items.append(x)

        def items_(self):
            return self.items

    log = Log.remote()
    log.add.remote(slow_value.remote("first"))  # waits on a ref; the next call must wait too
    log.add.remote("second")
    assert ray.get(log.items_.remote()) == ["first", "second"]


def test_max_concurrency_runs_calls_concurrently_on_threads(ray):
    @ray.remote(max_concurrency=4)
    class Gate:
        def __init__(self):
            import threading

            self.barrier = threading.Barrier(4, timeout=10)

        def meet(self):
            import threading

            self.barrier.wait()  # breaks (raises) unless 4 calls run at once
            return threading.get_ident()

    g = Gate.remote()
    idents = ray.get([g.meet.remote() for _ in range(4)], timeout=30)
    assert len(set(idents)) == 4


def test_async_methods_overlap_on_one_event_loop(ray):
    @ray.remote
    class Waiter:
        def __init__(self):
            import asyncio

            self.go = asyncio.Event()
            self.waiting = 0

        async def wait_for_go(self):
            self.waiting += 1
            await self.go.wait()
            return "released"

        async def waiting_count(self):
            return self.waiting

        async def release(self):
            self.go.set()

    w = Waiter.remote()
    refs = [w.wait_for_go.remote() for _ in range(100)]
    # every waiter is parked on the event at once: only possible if awaits overlap
    deadline = time.monotonic() + 20
    while ray.get(w.waiting_count.remote()) < 100:
        assert time.monotonic() < deadline, "async calls did not run concurrently"
    ready, _ = ray.wait(refs, num_returns=1, timeout=0.05)
    assert ready == []
    w.release.remote()
    assert ray.get(refs, timeout=20) == ["released"] * 100


def test_handle_passed_to_a_task_calls_the_same_actor(ray):
    @ray.remote
    class Counter:
        def __init__(self):
            self.n = 0

        def incr(self):
            self.n += 1
            return self.n

    @ray.remote
    def bump(counter, times):
        return ray.get([counter.incr.remote() for _ in range(times)])[-1]

    c = Counter.remote()
    ray.get([bump.remote(c, 5) for _ in range(3)])
    assert ray.get(c.incr.remote()) == 16


def test_handle_passed_to_another_actor(ray):
    @ray.remote
    class Store:
        def __init__(self):
            self.items = []

        def add(self, x):
            self.items.append(x)
            return len(self.items)

    @ray.remote
    class Producer:
        def __init__(self, store):
            self.store = store

        def produce(self, n):
            return ray.get([self.store.add.remote(i) for i in range(n)])

    store = Store.remote()
    p = Producer.remote(store)
    assert ray.get(p.produce.remote(3)) == [1, 2, 3]
    assert ray.get(store.add.remote("driver")) == 4


def test_handle_inside_a_container_reaches_the_actor(ray):
    @ray.remote
    class Echo:
        def ping(self, x):
            return x

    @ray.remote
    def call_all(handles):
        return ray.get([h.ping.remote(i) for i, h in enumerate(handles)])

    handles = [Echo.remote() for _ in range(3)]
    assert ray.get(call_all.remote(handles)) == [0, 1, 2]


def test_parent_actor_creates_and_calls_a_child_actor(ray):
    @ray.remote
    class ChildActor:
        def do_work(self):
            return "Work done by child"

    @ray.remote
    class ParentActor:
        def create_child(self):
            self.child_actor = ChildActor.remote()

        def get_work(self):
            return ray.get(self.child_actor.do_work.remote())

    parent_actor = ParentActor.remote()
    assert ray.get(parent_actor.create_child.remote()) is None
    assert ray.get(parent_actor.get_work.remote()) == "Work done by child"


def test_child_handle_returned_to_the_driver_is_callable(ray):
    @ray.remote
    class Child:
        def pid(self):
            return os.getpid()

    @ray.remote
    class Parent:
        def make(self):
            self.child = Child.remote()
            return self.child

    parent = Parent.remote()
    child = ray.get(parent.make.remote())
    assert ray.get(child.pid.remote()) != os.getpid()


def test_method_decorator_num_returns_gives_two_refs(ray):
    @ray.remote
    class Pair:
        @zmesh.method(num_returns=2)
        def split(self, x):
            return x, x * 2

    p = Pair.remote()
    a, b = p.split.remote(5)
    assert ray.get([a, b]) == [5, 10]


def test_method_options_override_num_returns_per_call(ray):
    @ray.remote
    class Triple:
        def three(self):
            return 1, 2, 3

    t = Triple.remote()
    refs = t.three.options(num_returns=3).remote()
    assert ray.get(list(refs)) == [1, 2, 3]


def test_actor_class_options_change_one_creation_only(ray):
    @ray.remote
    class Env:
        def read(self):
            return os.environ.get("ZMESH_ACTOR_TEST")

    plain = Env.remote()
    tuned = Env.options(runtime_env={"env_vars": {"ZMESH_ACTOR_TEST": "on"}}).remote()
    assert ray.get(tuned.read.remote()) == "on"
    assert ray.get(plain.read.remote()) is None


def test_actor_class_options_refuse_unknown_names(ray):
    @ray.remote
    class A:
        pass

    with pytest.raises(ValueError, match="max_restart"):
        A.options(max_restart=2)


def test_method_error_is_the_users_exception_and_the_actor_lives_on(ray):
    class Broken(Exception):
        pass

    @ray.remote
    class Flaky:
        def __init__(self):
            self.calls = 0

        def maybe(self, fail):
            self.calls += 1
            if fail:
                raise Broken("bad call")
            return self.calls

    f = Flaky.remote()
    with pytest.raises(Broken, match="bad call") as info:
        ray.get(f.maybe.remote(True))
    assert isinstance(info.value, zmesh.exceptions.RayTaskError)
    assert "Flaky.maybe" in str(info.value)
    assert ray.get(f.maybe.remote(False)) == 2


def test_calling_an_unknown_method_says_which(ray):
    @ray.remote
    class A:
        def known(self):
            return 1

    a = A.remote()
    with pytest.raises(AttributeError, match="unknown"):
        a.unknown.remote()


def test_instantiating_an_actor_class_directly_says_how_to_call_it(ray):
    @ray.remote
    class A:
        pass

    with pytest.raises(TypeError, match=r"A\.remote"):
        A()


def test_runtime_context_inside_an_actor_names_the_actor_and_node(ray):
    @ray.remote
    class Who:
        def ids(self):
            ctx = ray.get_runtime_context()
            return ctx.get_actor_id(), ctx.get_node_id()

    @ray.remote
    def task_actor_id():
        return ray.get_runtime_context().get_actor_id()

    w = Who.remote()
    actor_id, node_id = ray.get(w.ids.remote())
    assert actor_id == w._actor_id.hex()
    assert node_id == ray.get_runtime_context().get_node_id()
    assert ray.get(task_actor_id.remote()) is None
    assert ray.get_runtime_context().get_actor_id() is None


def _all_cpus_free(ray) -> bool:
    # task leases stay with their owner for a moment after the last task (reuse), so
    # resource checks first wait for those to go back
    return ray.available_resources().get("CPU") == ray.cluster_resources()["CPU"]


def test_many_default_actors_fit_on_a_two_cpu_node(ray):
    @ray.remote
    class Light:
        def pid(self):
            return os.getpid()

    assert ray.cluster_resources()["CPU"] == 2.0
    actors = [Light.remote() for _ in range(8)]
    pids = ray.get([a.pid.remote() for a in actors], timeout=60)
    assert len(set(pids)) == 8  # each actor has its own worker process
    assert wait_until(lambda: _all_cpus_free(ray))  # none of the 8 holds a CPU
    for a in actors:
        ray.kill(a)


def test_actor_with_num_cpus_holds_that_cpu_while_alive(ray):
    @ray.remote(num_cpus=1)
    class Heavy:
        def ping(self):
            return "pong"

    assert wait_until(lambda: _all_cpus_free(ray))
    total = ray.cluster_resources()["CPU"]
    h = Heavy.remote()
    assert ray.get(h.ping.remote()) == "pong"
    assert ray.available_resources()["CPU"] == total - 1
    ray.kill(h)
    assert wait_until(lambda: _all_cpus_free(ray))


def test_user_exception_with_its_own_constructor_is_reraised_as_its_class(ray):
    class QuotaError(Exception):
        def __init__(self, user, limit):
            super().__init__(f"{user} is over {limit}")
            self.user = user
            self.limit = limit

    @ray.remote
    class Quota:
        def check(self):
            raise QuotaError("ann", 3)

    q = Quota.remote()
    with pytest.raises(QuotaError, match="ann is over 3") as info:
        ray.get(q.check.remote())
    assert (info.value.user, info.value.limit) == ("ann", 3)


def test_handles_made_by_another_actor_work_at_once_in_the_driver(ray):
    # the driver's subscription can reach the node before the parent's CreateActor does
    @ray.remote
    class Child:
        def pid(self):
            return os.getpid()

    @ray.remote
    class Parent:
        def make(self):
            return Child.remote()

    parent = Parent.remote()
    for _ in range(30):
        child = ray.get(parent.make.remote())
        assert ray.get(child.pid.remote(), timeout=20) > 0
        ray.kill(child)
