"""Awaiting refs, as Ray's "AsyncIO / Concurrency for Actors" (ray-core/actors/async_api.rst)
shows it: `await ref`, `asyncio.wait`/`asyncio.gather` over refs, `ref.future()` as a
concurrent future and wrapped for asyncio, at the top level and inside async actors, and
the warning for a blocking get inside an async actor.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import sys

import pytest
from runtime_fixtures import wait_until


def test_await_and_asyncio_wait_on_refs_at_top_level(ray):
    # async_api.rst "ObjectRefs as asyncio.Futures": await some_task.remote() and
    # asyncio.wait over refs (unkept refs, as the doc writes them). Since Python 3.11
    # asyncio.wait takes futures only: Ray 2.60 there raises AttributeError ('ObjectRef' has
    # no 'add_done_callback') for a bare ref, and so does zmesh; wrapped refs work in both.
    @ray.remote
    def some_task():
        return 1

    async def await_obj_ref():
        first = await some_task.remote()
        done, pending = await asyncio.wait([asyncio.ensure_future(some_task.remote())])
        return first, [d.result() for d in done], pending

    first, done, pending = asyncio.run(await_obj_ref())
    assert first == 1 and done == [1] and not pending
    if sys.version_info >= (3, 11):
        async def bare():
            await asyncio.wait([some_task.remote()])

        with pytest.raises(AttributeError, match="add_done_callback"):
            asyncio.run(bare())


def test_gather_on_refs(ray):
    # async_api.rst: asyncio.gather over refs returns their values in order
    @ray.remote
    def square(x):
        return x * x

    async def main():
        return await asyncio.gather(*[square.remote(i) for i in range(10)])

    assert asyncio.run(main()) == [i * i for i in range(10)]


def test_ref_future_is_a_concurrent_future_and_wraps_for_asyncio(ray):
    # async_api.rst "ObjectRefs as concurrent.futures.Futures": ref.future().result() == 1,
    # and asyncio.wrap_future(ref.future()) awaits to the value
    @ray.remote
    def some_task():
        return 1

    refs = [some_task.remote() for _ in range(4)]
    futs = [ref.future() for ref in refs]
    assert all(isinstance(f, concurrent.futures.Future) for f in futs)
    assert [f.result() for f in concurrent.futures.as_completed(futs)] == [1, 1, 1, 1]

    async def convert_to_asyncio_future():
        ref = some_task.remote()
        fut = asyncio.wrap_future(ref.future())
        return await fut

    assert asyncio.run(convert_to_asyncio_future()) == 1


def test_await_errors_raise_the_tasks_exception(ray):
    # Ray-observed: awaiting a failed task's ref raises the task's exception (RayTaskError
    # that is also the user's class)
    @ray.remote
    def fail():
        raise KeyError("missing")

    async def main():
        return await fail.remote()

    with pytest.raises(KeyError, match="missing"):
        asyncio.run(main())


def test_await_inside_an_async_actor(ray):
    # async_api.rst: an async actor awaits other tasks' refs (and gathers them) without
    # blocking its event loop
    @ray.remote
    def inc(x):
        return x + 1

    @ray.remote
    class AsyncActor:
        async def run(self, n):
            one = await inc.remote(0)
            many = await asyncio.gather(*[inc.remote(i) for i in range(n)])
            done, _ = await asyncio.wait([asyncio.ensure_future(inc.remote(100))])
            return one, many, [d.result() for d in done]

    a = AsyncActor.remote()
    assert ray.get(a.run.remote(3)) == (1, [1, 2, 3], [101])
    ray.kill(a)


def test_blocking_get_in_an_async_actor_works_and_warns_as_ray_does(ray, capfd):
    # Ray-observed (worker.get): a blocking ray.get inside an async actor method returns the
    # value and logs, once, "Using blocking ray.get inside async actor method. This blocks
    # the event loop. ..."
    @ray.remote
    def one():
        return 1

    @ray.remote
    class AsyncActor:
        async def blocking(self):
            return ray.get(one.remote()) + ray.get(one.remote())

    a = AsyncActor.remote()
    assert ray.get(a.blocking.remote()) == 2
    seen = []

    def warned():
        seen.append(capfd.readouterr().err)
        return "Using blocking zmesh.get inside async actor method" in "".join(seen)

    assert wait_until(warned, timeout=30)
    assert "".join(seen).count("Using blocking zmesh.get inside async actor method") == 1
    ray.kill(a)
