"""A sync actor's calls come to its executor thread's own endpoint, not through the worker's
loop (`runtime/worker/actor_inbox.py`): counted by the messages the loop dispatches. The
rest of the actor's contract (order, cancel, errors, restarts) is the other actor tests'."""

from __future__ import annotations

import os
import threading

CALLS = 200


def test_a_sync_actors_calls_skip_its_workers_loop(ray):
    @ray.remote
    class Counter:
        def __init__(self):
            self.n = 0

        def bump(self):
            self.n += 1
            return self.n

        def loop_messages(self):
            from zmesh.runtime import context

            return context.current_client().loop.received

    c = Counter.remote()
    before = ray.get(c.loop_messages.remote())
    assert ray.get([c.bump.remote() for _ in range(CALLS)]) == list(range(1, CALLS + 1))
    after = ray.get(c.loop_messages.remote())
    assert after - before < CALLS // 2  # (the node's and the driver's other messages)


def test_with_the_inbox_turned_off_calls_go_through_the_loop(ray):
    @ray.remote(runtime_env={"env_vars": {"ZMESH_ACTOR_INBOX": "0"}})
    class Counter:
        def __init__(self):
            self.n = 0

        def bump(self):
            self.n += 1
            return self.n

        def loop_messages(self):
            from zmesh.runtime import context

            return context.current_client().loop.received

    c = Counter.remote()
    before = ray.get(c.loop_messages.remote())
    assert ray.get([c.bump.remote() for _ in range(CALLS)]) == list(range(1, CALLS + 1))
    assert ray.get(c.loop_messages.remote()) - before >= CALLS


def test_calls_from_several_threads_keep_each_callers_order(ray):
    @ray.remote
    class Log:
        def __init__(self):
            self.seen = []

        def add(self, who, i):
            self.seen.append((who, i))

        def seen_by(self, who):
            return [i for w, i in self.seen if w == who]

    log = Log.remote()

    def caller(who):
        ray.get([log.add.remote(who, i) for i in range(100)])

    threads = [threading.Thread(target=caller, args=(w,)) for w in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for who in range(3):
        assert ray.get(log.seen_by.remote(who)) == list(range(100))


def test_threaded_and_async_actors_take_calls_through_the_loop(ray):
    @ray.remote(max_concurrency=2)
    class Threaded:
        def loop_messages(self):
            from zmesh.runtime import context

            return context.current_client().loop.received

        def noop(self):
            return None

    @ray.remote
    class Async:
        async def loop_messages(self):
            from zmesh.runtime import context

            return context.current_client().loop.received

        async def noop(self):
            return None

    for actor in (Threaded.remote(), Async.remote()):
        before = ray.get(actor.loop_messages.remote())
        ray.get([actor.noop.remote() for _ in range(CALLS)])
        assert ray.get(actor.loop_messages.remote()) - before >= CALLS


def test_the_inbox_is_bound_before_the_constructor_runs(ray):
    """Its worker binds it while waiting for work, so "alive" does not wait for a bind (the
    bind cost 0.8 ms of a 4 ms create-and-first-call when it came after the constructor)."""

    @ray.remote
    class Probe:
        def __init__(self):
            from zmesh.runtime import context
            from zmesh.runtime.worker.actor_inbox import inbox_address

            at = inbox_address(context.current_client().address)
            self.bound_at_init = at is not None and os.path.exists(at[len("ipc://"):])
            self.at = at

        def seen(self):
            return self.bound_at_init, self.at

    bound, at = ray.get(Probe.remote().seen.remote())
    assert at and at.startswith("ipc://")
    assert bound, f"{at} was not bound yet when the constructor ran"
