"""Tasks a user thread sends straight to a leased worker (no hop through the owner's loop).

The worker runs tasks in the order they arrive, and a user thread's connection is not
ordered with the loop's: these check that chains, nested refs and many submitting threads
still get every value, and that back-to-back sync tasks really take the direct path.
"""

from __future__ import annotations

import threading

from zmesh.runtime import context


def _count_direct(client):
    """Wrap the submitter's direct path; returns the list of its outcomes so far."""
    sub = client.tasks
    outcomes: list[bool] = []
    original = sub._submit_direct

    def spy(task):
        sent = original(task)
        outcomes.append(sent and task.task_id in sub._direct)
        return sent

    sub._submit_direct = spy
    return outcomes


def test_back_to_back_sync_tasks_reuse_a_warm_lease_from_the_user_thread(ray):
    @ray.remote
    def double(x):
        return 2 * x

    assert ray.get(double.remote(1)) == 2  # the lease is granted through the loop
    client = context.current_client()
    outcomes = _count_direct(client)
    for i in range(50):
        assert ray.get(double.remote(i)) == 2 * i
    assert sum(outcomes) >= 40, outcomes  # a lease may lapse under load, not every time
    assert len(client.tasks.core.leases) >= 1


def test_a_chain_whose_first_task_went_directly_runs_in_order(ray):
    @ray.remote
    def inc(x):
        return x + 1

    ray.get(inc.remote(0))
    client = context.current_client()
    outcomes = _count_direct(client)
    for _ in range(20):
        ref = inc.remote(0)  # straight to the warm worker; the rest chain onto it
        for _ in range(10):
            ref = inc.remote(ref)
        assert ray.get(ref, timeout=60) == 11
    assert any(outcomes)


def test_a_nested_ref_to_a_directly_sent_task_is_read_after_it(ray):
    @ray.remote
    def make(i):
        return i

    @ray.remote
    def read(box):
        return ray.get(box[0]) + 100

    ray.get(make.remote(0))
    for i in range(20):
        a = make.remote(i)
        assert ray.get(read.remote([a]), timeout=60) == i + 100


def test_threads_submitting_at_once_get_every_value(ray):
    @ray.remote
    def square(x):
        return x * x

    @ray.remote
    def inc(x):
        return x + 1

    ray.get(square.remote(0))
    errors: list[BaseException] = []

    def work(base: int) -> None:
        try:
            for i in range(40):
                assert ray.get(square.remote(base + i), timeout=60) == (base + i) ** 2
                ref = inc.remote(base)
                ref = inc.remote(ref)
                assert ray.get(ref, timeout=60) == base + 2
            refs = [square.remote(base + i) for i in range(50)]
            assert ray.get(refs, timeout=60) == [(base + i) ** 2 for i in range(50)]
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(1000 * k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors
