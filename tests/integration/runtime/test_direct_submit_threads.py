"""Tasks that user threads send to leased workers themselves (owner/submit.py's direct
path) under many threads: a worker still gets each caller's tasks in the order the owner
decided them (a chained task never overtakes the task making its argument, which would
leave the worker waiting forever), and threads that come and go leave no connections
behind. Both failed before the direct path held its deferred sends in order and closed a
thread's connections with the thread (found by review: a deadlock in 60 s on every run,
and ~100 fds leaked per 50 threads)."""

from __future__ import annotations

import os
import random
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest


@pytest.fixture
def one_cpu():
    import zmesh as ray

    ray.init(num_cpus=1)
    yield ray
    ray.shutdown()


def test_each_callers_tasks_reach_the_worker_in_order(one_cpu):
    ray = one_cpu

    @ray.remote
    def stamp(tag, i):
        import time

        return (tag, i, time.monotonic_ns(), os.getpid())

    ray.get(stamp.remote(-1, 0))
    runs: dict[int, list[tuple[int, int]]] = {}
    errors: list[BaseException] = []

    def caller(tag: int) -> None:
        rng = random.Random(tag)
        seen: list[tuple[int, int]] = []  # (when, pid) of each of its tasks, as submitted
        try:
            i = 0
            for _ in range(150):
                k = rng.choice([1, 1, 2, 3, 6])
                refs = [stamp.remote(tag, i + j) for j in range(k)]
                i += k
                seen += [(got[2], got[3]) for got in ray.get(refs, timeout=60)]
        except BaseException as exc:  # reported below
            errors.append(exc)
        runs[tag] = seen

    threads = [threading.Thread(target=caller, args=(t,)) for t in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors[:3]
    assert all(not t.is_alive() for t in threads)
    assert len({pid for seen in runs.values() for _, pid in seen}) == 1  # 1 CPU, 1 worker
    for tag, seen in runs.items():
        late = [n for n, (a, b) in enumerate(zip(seen, seen[1:])) if b[0] < a[0]]
        assert not late, f"caller {tag}'s tasks ran out of order after its tasks {late[:5]}"


def test_chained_tasks_from_many_threads_all_finish(one_cpu):
    ray = one_cpu

    @ray.remote
    def busy(i):
        return i

    @ray.remote
    def make(n):
        return n

    @ray.remote
    def read(box):
        return ray.get(box[0]) + 1  # the argument's task must have run first

    errors: list[BaseException] = []
    stop = threading.Event()

    def noise(seed: int) -> None:
        rng = random.Random(seed)
        try:
            while not stop.is_set():
                k = rng.choice([1, 2, 3, 5])
                assert ray.get([busy.remote(j) for j in range(k)], timeout=60) == list(range(k))
        except BaseException as exc:
            errors.append(exc)

    def chain() -> None:
        try:
            for n in range(40):
                assert ray.get(read.remote([make.remote(n)]), timeout=60) == n + 1
        except BaseException as exc:
            errors.append(exc)

    noisy = [threading.Thread(target=noise, args=(s,)) for s in range(3)]
    chains = [threading.Thread(target=chain) for _ in range(2)]
    for t in noisy + chains:
        t.start()
    for t in chains:
        t.join(300)
    stop.set()
    for t in noisy:
        t.join(120)
    assert not errors, errors[:3]
    assert all(not t.is_alive() for t in noisy + chains)


def test_threads_that_come_and_go_leave_no_connections(one_cpu):
    ray = one_cpu
    psutil = pytest.importorskip("psutil")

    @ray.remote
    def pid(_):
        return os.getpid()

    worker = ray.get(pid.remote(0))
    me, peer = psutil.Process(), psutil.Process(worker)

    def round_of_threads() -> None:
        with ThreadPoolExecutor(8) as pool:  # fresh threads each round, gone after it
            assert list(pool.map(lambda k: ray.get(pid.remote(k)), range(8))) == [worker] * 8

    round_of_threads()
    before, before_worker = me.num_fds(), peer.num_fds()
    for _ in range(40):
        round_of_threads()
    # 320 threads sent tasks; each had a connection of its own while it lived
    assert me.num_fds() <= before + 16, (before, me.num_fds())
    assert peer.num_fds() <= before_worker + 16, (before_worker, peer.num_fds())
