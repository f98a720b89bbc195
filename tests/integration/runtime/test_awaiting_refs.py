"""Awaiting refs that no variable keeps: `await f.remote()` and `as_completed` over futures,
in the driver and inside an async actor (the ref was dropped before its value came, and the
future never resolved)."""

from __future__ import annotations

import asyncio


def test_await_of_an_unkept_ref_completes(ray):
    @ray.remote
    def add_one(x):
        return x + 1

    async def main():
        return await add_one.remote(1)

    assert asyncio.run(asyncio.wait_for(main(), 60)) == 2


def test_as_completed_over_futures_of_unkept_refs_completes(ray):
    @ray.remote
    def square(x):
        return x * x

    async def main():
        futs = [asyncio.wrap_future(square.remote(i).future()) for i in range(4)]
        return sorted([await c for c in asyncio.as_completed(futs)])

    assert asyncio.run(asyncio.wait_for(main(), 60)) == [0, 1, 4, 9]


def test_async_actor_awaits_unkept_refs(ray):
    @ray.remote
    def double(x):
        return 2 * x

    @ray.remote
    class Gatherer:
        async def run(self):
            first = await double.remote(5)
            futs = [asyncio.wrap_future(double.remote(i).future()) for i in range(3)]
            rest = sorted([await c for c in asyncio.as_completed(futs)])
            return first, rest

    g = Gatherer.remote()
    assert ray.get(g.run.remote(), timeout=60) == (10, [0, 2, 4])
