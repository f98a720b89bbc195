"""Streaming generators and num_returns="dynamic", as Ray's documentation shows them.

Sources: Ray's "Ray Generators" guide (doc/source/ray-core/ray-generator.rst and its
doc_code/streaming_generator.py) and "Dynamic generators" (tasks/dynamic_generators.rst).
Each test names the example or the documented behaviour it follows.
"""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

import zmesh
from zmesh.exceptions import TaskCancelledError


def test_generator_function_streams_by_default(ray):
    # ray-generator.rst "Getting started" / internals/streaming-generator: any generator
    # function under @ray.remote returns an ObjectRefGenerator; iterating gives one ref per yield
    @ray.remote
    def numbers():
        yield from range(3)  # the doc's `for i in range(3): yield i`

    gen = numbers.remote()
    assert isinstance(gen, ray.ObjectRefGenerator)
    assert [ray.get(ref) for ref in gen] == [0, 1, 2]


def test_next_returns_each_ref_before_the_task_finishes(ray):
    # doc_code __streaming_generator_execute__: next(gen) blocks until the next yield only
    @ray.remote
    class Latch:
        def __init__(self):
            self.ev = threading.Event()

        def open(self):
            self.ev.set()

        def wait(self):
            return self.ev.wait(60)

    latch = Latch.options(max_concurrency=2).remote()

    @ray.remote(num_returns="streaming")
    def task(latch):
        yield 0
        ray.get(latch.wait.remote())  # the task is still running while the caller reads item 0
        yield 1

    gen = task.remote(latch)
    assert ray.get(next(gen)) == 0
    assert not gen.is_finished()
    latch.open.remote()
    assert ray.get(next(gen)) == 1
    with pytest.raises(StopIteration):
        next(gen)
    assert gen.is_finished()


def test_exception_midway_comes_as_the_next_ref(ray):
    # doc_code __streaming_generator_exception__: raise after the first yield; the second
    # next(gen) returns a ref whose get raises the ValueError, then the generator ends
    @ray.remote
    def task():
        for i in range(5):
            if i == 1:
                raise ValueError("boom at 1")
            yield i

    gen = task.remote()
    assert ray.get(next(gen)) == 0
    with pytest.raises(ValueError, match="boom at 1"):
        ray.get(next(gen))
    with pytest.raises(StopIteration):
        next(gen)


def test_generators_in_every_actor_execution_model(ray):
    # doc_code __streaming_generator_actor_model__: regular, async and threaded actors
    @ray.remote
    class Actor:
        def f(self):
            yield from range(5)

    @ray.remote
    class AsyncActor:
        async def f(self):
            for i in range(5):
                await asyncio.sleep(0)
                yield i

    @ray.remote(max_concurrency=5)
    class ThreadedActor:
        def f(self):
            yield from range(5)

    for cls in (Actor, AsyncActor, ThreadedActor):
        actor = cls.remote()
        assert [ray.get(ref) for ref in actor.f.remote()] == [0, 1, 2, 3, 4], cls
        ray.kill(actor)


def test_async_for_and_await_on_the_refs(ray):
    # doc_code __streaming_generator_asyncio__ and __concurrency_asyncio__: two generators
    # consumed concurrently with `async for` and `await ref`
    @ray.remote
    def task(base):
        for i in range(5):
            yield base + i

    async def consume(base):
        return [await ref async for ref in task.remote(base)]

    async def main():
        return await asyncio.gather(consume(0), consume(100))

    assert asyncio.run(main()) == [[0, 1, 2, 3, 4], [100, 101, 102, 103, 104]]


def test_wait_treats_a_generator_as_ready_when_its_next_item_is(ray):
    # doc_code __streaming_generator_wait_simple__ / __wait_complex__
    @ray.remote
    class Latch:
        def __init__(self):
            self.ev = threading.Event()

        def open(self):
            self.ev.set()

        def wait(self):
            return self.ev.wait(60)

    latch = Latch.options(max_concurrency=2).remote()

    @ray.remote
    def task(latch):
        ray.get(latch.wait.remote())
        yield 1
        yield 2

    @ray.remote
    def regular():
        return "done"

    gen = task.remote(latch)
    ready, unready = ray.wait([gen], timeout=0)
    assert ready == [] and unready == [gen]
    latch.open.remote()
    ready, unready = ray.wait([gen])
    assert ready == [gen] and unready == []
    result = []
    pending = [gen, regular.remote()]
    while pending:
        ready, pending = ray.wait(pending)
        for r in ready:
            if isinstance(r, ray.ObjectRefGenerator):
                try:
                    result.append(ray.get(next(r)))
                except StopIteration:
                    pass
                else:
                    pending.append(r)
            else:
                result.append(ray.get(r))
    assert sorted(result, key=str) == [1, 2, "done"]


def test_completed_is_ready_when_the_task_finished(ray):
    # ray-generator.rst "Wait until a generator task completes": get(gen.completed())
    @ray.remote
    def task():
        yield from range(3)

    gen = task.remote()
    ray.get(gen.completed())
    assert gen.next_ready()
    assert [ray.get(r) for r in gen] == [0, 1, 2]


def test_large_items_travel_through_the_object_store(ray):
    # patterns/generators.rst: yield large values one at a time (stored, not inlined)
    @ray.remote
    def large_values(n):
        for i in range(n):
            yield np.full(1_000_000, i, dtype=np.uint8)

    sums = [int(ray.get(ref).sum()) for ref in large_values.remote(3)]
    assert sums == [0, 1_000_000, 2_000_000]


def test_a_large_item_outlives_the_actor_that_yielded_it(ray):
    # the caller owns each item (as it owns a call's return): before, a stored item was
    # allocated as the actor's own, so the node freed it when the actor died, under the
    # caller's ref (ObjectLostError), while a plain return's copy survived the same kill
    from zmesh.exceptions import RayActorError

    @ray.remote
    class Maker:
        def items(self):
            yield np.full(4 << 20, 9, dtype=np.uint8)

        def one(self):
            return np.full(4 << 20, 8, dtype=np.uint8)

        def ping(self):
            return "ok"

    maker = Maker.remote()
    (item,) = list(maker.items.remote())  # here (unread: nothing of it mapped here yet)
    returned = maker.one.remote()
    ray.wait([returned], timeout=60)
    ray.kill(maker)
    with pytest.raises(RayActorError):
        ray.get(maker.ping.remote(), timeout=60)  # its death is known (its objects went)
    zmesh.runtime.context.current_client().query("store")  # (after the node's frees)
    assert int(ray.get(returned, timeout=60)[0]) == 8
    assert int(ray.get(item, timeout=60)[0]) == 9


def test_backpressure_pauses_the_generator_until_items_are_consumed(ray):
    # Ray's `_generator_backpressure_num_objects`: the task stops yielding once that many
    # items are unconsumed (Ray-observed: the producer's count stays at the threshold)
    @ray.remote
    class Counter:
        def __init__(self):
            self.n = 0

        def inc(self):
            self.n += 1

        def get(self):
            return self.n

    counter = Counter.remote()

    @ray.remote(_generator_backpressure_num_objects=2)
    def produce(counter):
        for i in range(6):
            ray.get(counter.inc.remote())
            yield i

    gen = produce.remote(counter)
    first = next(gen)
    assert ray.get(first) == 0
    # the producer is paused with 2 unconsumed items beyond the one taken: at most 3 made
    ready, _ = ray.wait([gen], timeout=30)
    assert ready == [gen]
    made = ray.get(counter.get.remote())
    assert made <= 3
    assert [ray.get(r) for r in gen] == [1, 2, 3, 4, 5]
    assert ray.get(counter.get.remote()) == 6


def test_cancel_a_generator_task(ray):
    # ray-generator.rst "Cancellation": after ray.cancel(gen), next(gen) can return a ref
    # holding TaskCancelledError
    @ray.remote
    def forever():
        import time

        yield 0
        while True:  # busy work in short steps: a cancel lands between two of them
            time.sleep(0.01)

    gen = forever.remote()
    assert ray.get(next(gen)) == 0
    ray.cancel(gen)
    with pytest.raises(TaskCancelledError):
        for ref in gen:
            ray.get(ref)


def test_dynamic_returns_a_ref_to_a_generator_of_refs(ray):
    # dynamic_generators.rst: num_returns="dynamic" returns one ref; its value is a
    # DynamicObjectRefGenerator whose refs hold the yielded values
    @ray.remote(num_returns="dynamic")
    def split(array, chunk_size):
        while len(array) > 0:
            yield array[:chunk_size]
            array = array[chunk_size:]

    dynamic_ref = split.remote(np.arange(10), 3)
    assert isinstance(dynamic_ref, ray.ObjectRef)
    chunks = [ray.get(r).tolist() for r in ray.get(dynamic_ref)]
    assert chunks == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]

    @ray.remote
    def get_size(ref_generator):
        return [len(ray.get(r)) for r in ref_generator]

    # the docs pass the ref on: the task receives the DynamicObjectRefGenerator
    assert ray.get(get_size.remote(dynamic_ref)) == [3, 3, 3, 1]


def test_actor_generator_with_streaming_option_and_method_decorator(ray):
    # ray-generator.rst: num_returns="streaming" on a method; @ray.method works too
    @ray.remote
    class Producer:
        @ray.method(num_returns="streaming")
        def items(self, n):
            for i in range(n):
                yield i * i

    p = Producer.remote()
    assert [ray.get(r) for r in p.items.remote(4)] == [0, 1, 4, 9]
    assert [ray.get(r) for r in p.items.options(num_returns="streaming").remote(2)] == [0, 1]


def test_a_generator_cannot_be_passed_to_a_task(ray):
    # ray-generator.rst "Limitation": passing the generator to another task is unsupported
    @ray.remote
    def task():
        yield 1

    @ray.remote
    def use(g):
        return g

    gen = task.remote()
    with pytest.raises(Exception, match="ObjectRefGenerator|cannot serialize"):
        use.remote(gen)
    assert [ray.get(r) for r in gen] == [1]


def test_zmesh_exports_the_generator_type():
    assert zmesh.ObjectRefGenerator.__name__ == "ObjectRefGenerator"
