"""ray.util's everyday helpers under zmesh: ActorPool, Queue, multiprocessing.Pool,
as_completed/map_unordered, list_named_actors, get_node_ip_address, inspect_serializability.

Expected outputs come from Ray's documentation: "Utility Classes" (ray-core/actors/
actor-utils.rst), the ActorPool/Queue docstrings, "Distributed multiprocessing.Pool"
(ray-more-libs/multiprocessing.rst) and "Troubleshooting serialization" (inspect_serializability);
each test says which.
"""

from __future__ import annotations

import asyncio
import io
import threading
import time

import pytest

from zmesh.util import ActorPool, as_completed, map_unordered
from zmesh.util.multiprocessing import Pool
from zmesh.util.multiprocessing import TimeoutError as PoolTimeout
from zmesh.util.queue import Empty, Full, Queue


@pytest.fixture
def doubler(ray):
    @ray.remote
    class Actor:
        def double(self, v):
            return 2 * v

    return Actor


def test_actor_pool_map_keeps_order(ray, doubler):
    # actor-utils.rst: list(pool.map(lambda a, v: a.double.remote(v), [1, 2, 3, 4])) -> [2, 4, 6, 8]
    pool = ActorPool([doubler.remote(), doubler.remote()])
    assert list(pool.map(lambda a, v: a.double.remote(v), [1, 2, 3, 4])) == [2, 4, 6, 8]


def test_actor_pool_map_unordered_gives_every_result(ray, doubler):
    # ActorPool.map_unordered docstring: the same results, in completion order
    pool = ActorPool([doubler.remote(), doubler.remote()])
    assert sorted(pool.map_unordered(lambda a, v: a.double.remote(v), range(20))) == \
        [2 * v for v in range(20)]


def test_actor_pool_submit_get_next_has_next(ray, doubler):
    # ActorPool.submit/get_next docstrings: submit 1 and 2, get_next() -> 2 then 4
    pool = ActorPool([doubler.remote(), doubler.remote()])
    pool.submit(lambda a, v: a.double.remote(v), 1)
    pool.submit(lambda a, v: a.double.remote(v), 2)
    assert pool.has_next()
    assert pool.get_next() == 2
    assert pool.get_next() == 4
    assert not pool.has_next()
    with pytest.raises(StopIteration, match="No more results to get"):
        pool.get_next()


def test_actor_pool_get_next_unordered(ray, doubler):
    # ActorPool.get_next_unordered docstring: results in completion order; after it,
    # get_next() is refused (Ray's ValueError)
    pool = ActorPool([doubler.remote(), doubler.remote()])
    pool.submit(lambda a, v: a.double.remote(v), 1)
    pool.submit(lambda a, v: a.double.remote(v), 2)
    got = {pool.get_next_unordered(), pool.get_next_unordered()}
    assert got == {2, 4}


def test_actor_pool_has_free_pop_idle_push(ray, doubler):
    # ActorPool.has_free / pop_idle / push docstrings
    a1, a2 = doubler.remote(), doubler.remote()
    pool = ActorPool([a1])
    pool.submit(lambda a, v: a.double.remote(v), 1)
    assert not pool.has_free()
    assert pool.pop_idle() is None
    assert pool.get_next() == 2
    assert pool.has_free()
    assert pool.pop_idle() == a1
    assert not pool.has_free()
    pool.push(a2)
    assert pool.has_free()
    with pytest.raises(ValueError, match="already belongs"):
        pool.push(a2)


def test_actor_pool_queues_submits_beyond_its_actors(ray, doubler):
    # ActorPool.submit docstring: with no idle actor the call waits for one
    pool = ActorPool([doubler.remote()])
    for v in range(5):
        pool.submit(lambda a, v: a.double.remote(v), v)
    assert [pool.get_next() for _ in range(5)] == [0, 2, 4, 6, 8]


def test_actor_pool_get_next_timeout(ray):
    # ActorPool.get_next(timeout=...) raises TimeoutError when the result is late
    @ray.remote
    class Slow:
        def __init__(self):
            self.ev = threading.Event()

        def wait(self, _):
            return self.ev.wait(30)

    pool = ActorPool([Slow.remote()])
    pool.submit(lambda a, v: a.wait.remote(v), 0)
    with pytest.raises(TimeoutError):
        pool.get_next(timeout=0.2)


def test_queue_consumers_drain_until_empty(ray):
    # actor-utils.rst "Message passing using Ray Queue": two consumers get(block=True,
    # timeout=1) until Empty; together they see every item once
    queue = Queue(maxsize=100)

    @ray.remote
    def consumer(queue):
        got = []
        try:
            while True:
                got.append(queue.get(block=True, timeout=1))
        except Empty:
            pass
        return got

    for i in range(10):
        queue.put(i)
    results = ray.get([consumer.remote(queue) for _ in range(2)])
    assert sorted(results[0] + results[1]) == list(range(10))
    assert queue.empty() and queue.qsize() == 0 and len(queue) == 0
    queue.shutdown()


def test_queue_full_and_empty_and_batches(ray):
    # ray.util.queue docstrings: put_nowait on a full queue raises Full, get_nowait on an
    # empty one Empty, the batch forms are all-or-nothing; Empty/Full are queue.Empty/Full
    import queue as stdlib_queue

    q = Queue(maxsize=2)
    q.put_nowait(1)
    q.put(2)
    assert q.full()
    with pytest.raises(Full):
        q.put_nowait(3)
    with pytest.raises(stdlib_queue.Full):
        q.put(3, timeout=0.1)
    with pytest.raises(Full):
        q.put_nowait_batch([3, 4])
    assert q.get_nowait_batch(2) == [1, 2]
    with pytest.raises(Empty):
        q.get_nowait()
    with pytest.raises(stdlib_queue.Empty):
        q.get(timeout=0.1)
    with pytest.raises(Empty):
        q.get_nowait_batch(1)
    with pytest.raises(ValueError, match="non-negative"):
        q.get(timeout=-1)
    q.put_nowait_batch([5, 6])
    assert [q.get(), q.get()] == [5, 6]
    q.shutdown()


def test_queue_async_put_get(ray):
    # ray.util.queue docstrings: put_async/get_async await instead of blocking
    q = Queue()

    async def main():
        await q.put_async("a")
        await q.put_async("b")
        return [await q.get_async(), await q.get_async()]

    assert asyncio.run(main()) == ["a", "b"]
    q.shutdown()


def test_queue_blocking_get_wakes_on_put(ray):
    # a get blocked on an empty queue returns when another process puts (Ray-observed)
    q = Queue()

    @ray.remote
    def producer(q):
        q.put("late")

    ref = producer.remote(q)
    assert q.get(timeout=60) == "late"
    ray.get(ref)
    q.shutdown()


def _functions():
    # defined here, not at module level: workers cannot import this test module, so the
    # functions must travel by value (as in a Ray driver script's __main__)
    def f_index(index):
        return index

    def f_pair(a, b):
        return a * b

    def f_fail(x):
        if x == 3:
            raise ZeroDivisionError("x is 3")
        return x

    return f_index, f_pair, f_fail


def test_multiprocessing_pool_map(ray):
    # multiprocessing.rst: for result in pool.map(f, range(100)): print(result) -> 0..99
    f_index, f_pair, _ = _functions()
    with Pool(processes=2) as pool:
        assert pool.map(f_index, range(100)) == list(range(100))
        assert pool.starmap(f_pair, [(1, 2), (3, 4)]) == [2, 12]
        assert list(pool.imap(f_index, range(10))) == list(range(10))
        assert sorted(pool.imap_unordered(f_index, range(10), chunksize=3)) == list(range(10))
        assert pool.apply(f_pair, (6, 7)) == 42
        res = pool.apply_async(f_pair, (2, 3))
        assert res.get(timeout=60) == 6 and res.ready() and res.successful()


def test_multiprocessing_pool_errors_callbacks_and_lifecycle(ray):
    # stdlib Pool semantics (Ray's Pool follows them): the function's exception re-raises,
    # callbacks run with the result, join() needs close(), a closed pool refuses work
    f_index, _, f_fail = _functions()
    got = []
    done = threading.Event()
    pool = Pool(processes=2, initializer=f_index, initargs=(1,))
    with pytest.raises(ZeroDivisionError, match="x is 3"):
        pool.map(f_fail, range(5))
    pool.map_async(f_index, [1, 2], callback=lambda r: (got.append(r), done.set()))
    assert done.wait(60) and got == [[1, 2]]
    with pytest.raises(ValueError, match="still running"):
        pool.join()
    pool.close()
    with pytest.raises(ValueError, match="not running"):
        pool.map(f_index, [1])
    pool.join()


def test_multiprocessing_async_result_timeout(ray):
    # stdlib AsyncResult: get(timeout) raises multiprocessing.TimeoutError; successful()
    # before the result is ready raises ValueError
    with Pool(processes=1) as pool:
        res = pool.apply_async(time.sleep, (5,))
        with pytest.raises(PoolTimeout):
            res.get(timeout=0.1)
        with pytest.raises(ValueError):
            res.successful()


def test_as_completed_and_map_unordered(ray):
    # ray.util.as_completed / map_unordered docstrings: every result, in completion order;
    # yield_obj_refs=True yields the refs instead
    @ray.remote
    def square(x):
        return x * x

    refs = [square.remote(i) for i in range(10)]
    assert sorted(as_completed(refs, chunk_size=3)) == [i * i for i in range(10)]
    assert sorted(ray.get(list(as_completed(refs, yield_obj_refs=True)))) == \
        [i * i for i in range(10)]
    assert sorted(map_unordered(square, range(30), backpressure_size=4, chunk_size=2)) == \
        [i * i for i in range(30)]


def test_list_named_actors(ray):
    # ray.util.list_named_actors docstring: names in the current namespace; with
    # all_namespaces=True, dicts with "name" and "namespace"
    @ray.remote
    class A:
        def ping(self):
            return 1

    a = A.options(name="listed-a").remote()
    b = A.options(name="listed-b", namespace="elsewhere").remote()
    ray.get([a.ping.remote(), b.ping.remote()])
    names = ray.util.list_named_actors()
    assert "listed-a" in names and "listed-b" not in names
    everywhere = ray.util.list_named_actors(all_namespaces=True)
    assert {"name": "listed-b", "namespace": "elsewhere"} in everywhere
    ray.kill(a)
    ray.kill(b)


def test_get_node_ip_address(ray):
    # ray.util.get_node_ip_address: the node's IP as a dotted string
    ip = ray.util.get_node_ip_address()
    parts = ip.split(".")
    assert len(parts) == 4 and all(p.isdigit() for p in parts)


def test_inspect_serializability_finds_the_lock(ray):
    # "Troubleshooting serialization" (ray-core/objects/serialization.rst): a function using
    # a threading.Lock is not serializable, and the lock is named as the culprit
    lock = threading.Lock()

    def test():
        with lock:
            pass

    out = io.StringIO()
    ok, failures = ray.util.inspect_serializability(test, name="test", print_file=out)
    assert not ok
    assert [f.name for f in failures] == ["lock"]
    assert "FAIL serialization" in out.getvalue()
    f_index = _functions()[0]
    ok, failures = ray.util.inspect_serializability(f_index, name="f_index", print_file=out)
    assert ok and failures == set()
