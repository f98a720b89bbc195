"""Threads in a sync actor's worker: user code runs on one thread (as in Ray), and the
worker's loop is still served while a call blocks, waits on other threads or runs long
(guards for any change that moves calls between the worker's threads)."""

from __future__ import annotations

import threading
import time

from runtime_fixtures import wait_until


def test_every_call_runs_on_the_thread_that_ran_init(ray):
    @ray.remote
    class Bound:
        def __init__(self):
            self.thread = threading.get_ident()

        def same_thread(self):
            return threading.get_ident() == self.thread

        def nested(self, other):
            ray.get(other.same_thread.remote())  # blocks in the runtime mid-call
            return threading.get_ident() == self.thread

    a, b = Bound.remote(), Bound.remote()
    refs = [a.same_thread.remote() for _ in range(200)] + [a.nested.remote(b)
                                                            for _ in range(20)]
    assert all(ray.get(refs))
    assert all(ray.get([a.same_thread.remote() for _ in range(50)]))


def test_a_helper_thread_of_a_call_can_use_the_runtime(ray):
    @ray.remote
    def value():
        return 41

    @ray.remote
    class Spawner:
        def run(self):
            out = []
            t = threading.Thread(target=lambda: out.append(ray.get(value.remote()) + 1))
            t.start()
            t.join(60)  # the call waits on a plain thread, which waits on the loop
            return out

    assert ray.get(Spawner.remote().run.remote(), timeout=60) == [42]


def test_the_loop_is_served_while_a_call_runs_long(ray):
    @ray.remote
    class Flag:
        def __init__(self):
            self.up = False

        def set(self):
            self.up = True

        def is_set(self):
            return self.up

    @ray.remote
    class Holder:
        def make(self):
            return [ray.put("held by the actor")]  # the actor owns it; the driver borrows

        def busy(self, flag, seconds):
            flag.set.remote()
            time.sleep(seconds)  # neither blocks in the runtime nor returns for a while
            return "done"

    h, flag = Holder.remote(), Flag.remote()
    [inner] = ray.get(h.make.remote())
    busy = h.busy.remote(flag, 60)
    # the busy worker's loop must be served for its call to Flag to go out at all (it first
    # learns where Flag runs), and to answer for the object it owns
    assert wait_until(lambda: ray.get(flag.is_set.remote()), timeout=20)
    # the owner (the busy actor's worker) must answer this before the call ends
    assert ray.get(inner, timeout=20) == "held by the actor"
    ray.kill(h)
    del busy
