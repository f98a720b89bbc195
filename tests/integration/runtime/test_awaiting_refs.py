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


# Values too big to travel inline lie in the store: reading one asks the node. When such a
# value came after the await began, it was read on the loop thread, which is the only one
# that receives the node's reply: every such await failed after 30 s with "the zmesh node
# did not answer within 30.0s" (all three tests below failed so before).
BIG = 200_000  # int64s: 1.6 MB, stored


def test_the_driver_awaits_a_stored_value_that_comes_later(ray):
    import numpy as np

    @ray.remote
    def big(v):
        return np.full(BIG, v)

    async def main():
        first = await big.remote(3)
        fut = asyncio.wrap_future(big.remote(4).future())
        return int(first[-1]), int((await fut)[-1])

    assert asyncio.run(asyncio.wait_for(main(), 60)) == (3, 4)


def test_an_async_actor_awaits_a_stored_task_result(ray):
    import numpy as np

    @ray.remote
    def big(v):
        return np.full(BIG, v)

    @ray.remote
    class Awaiter:
        async def run(self, v):
            return int((await big.remote(v))[-1])

    assert ray.get(Awaiter.remote().run.remote(5), timeout=60) == 5


def test_an_async_actor_awaits_a_stored_object_it_borrows(ray):
    import threading

    import numpy as np

    @ray.remote(max_concurrency=2)
    class Gate:
        def __init__(self):
            self.opened = threading.Event()

        def open(self):
            self.opened.set()

        def wait(self):
            return self.opened.wait(60)

    @ray.remote
    def big_after(gate, v):
        assert ray.get(gate.wait.remote(), timeout=60)
        return np.full(BIG, v)

    @ray.remote
    class Awaiter:
        async def run(self, box, gate):
            async def value(ref):
                return await ref

            waiting = asyncio.ensure_future(value(box[0]))
            await asyncio.sleep(0)  # (a yield: the await above begins, its value not there)
            await gate.open.remote()  # the value can come now, after the await began
            return int((await waiting)[-1])

    gate = Gate.remote()
    x = big_after.remote(gate, 6)  # the driver owns it; the actor borrows it
    assert ray.get(Awaiter.remote().run.remote([x], gate), timeout=60) == 6
