"""The simulation kernel and threads outside it (a GC finalizer may run on any thread)."""

from __future__ import annotations

import threading

from zmesh.testing.sim_kernel import Kernel, SimProcess


def test_an_event_scheduled_from_a_foreign_thread_waits_for_the_root_and_runs_once() -> None:
    kernel = Kernel(seed=1)
    proc = SimProcess(name="p", host="h")
    ran: list[str] = []
    scheduled = threading.Event()

    def foreign() -> None:  # stands in for an ObjectRef.__del__ run by the GC on a daemon thread
        kernel.schedule(0.0, proc, ran.append, "foreign")
        scheduled.set()

    t = threading.Thread(target=foreign)
    t.start()
    t.join(timeout=30)
    assert scheduled.is_set()
    assert kernel._heap == []  # the thread that does not hold the baton never touches the heap
    kernel.schedule(1.0, proc, ran.append, "root")
    kernel.run_for(2.0)
    assert ran == ["foreign", "root"]
    kernel.close()


def test_many_foreign_schedules_while_the_root_runs_lose_nothing() -> None:
    kernel = Kernel(seed=2)
    proc = SimProcess(name="p", host="h")
    ran: list[int] = []
    stop = threading.Event()
    sent: list[int] = []

    def foreign() -> None:
        i = 0
        while not stop.is_set() and i < 5_000:
            kernel.schedule(0.0, proc, ran.append, -1)
            sent.append(i)
            i += 1

    def tick(n: int) -> None:
        ran.append(n)
        if n < 2_000:
            kernel.schedule(kernel.now + 0.001, proc, tick, n + 1)

    t = threading.Thread(target=foreign)
    kernel.schedule(0.0, proc, tick, 0)
    t.start()
    kernel.run_for(1.0)  # the root pushes and pops its heap while the thread schedules
    stop.set()
    t.join(timeout=30)
    kernel.run_for(1.0)  # takes in what came after the last step
    assert [n for n in ran if n >= 0] == list(range(2_001))
    assert ran.count(-1) == len(sent)
    kernel.close()
