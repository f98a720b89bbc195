"""Blocked work lends its CPU (issues 8, 13), checked with hypothesis on the pure scheduler:
a blocked task gives back exactly the CPU it holds and never its GPUs or custom resources,
takes it back at once when it resumes (oversubscribing, as Ray does), and once everything
finishes every amount is back; `validate()` holds after every step."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from zmesh.core.resources import SCALE
from zmesh.core.scheduler import LocalScheduler
from zmesh.core.scheduling import Dispatch, Request

TOTAL = {"CPU": 2, "GPU": 1, "accel": 2}
shapes = st.sampled_from([
    {"CPU": 1}, {}, {"CPU": 2}, {"CPU": 0.5}, {"CPU": 1, "GPU": 1}, {"GPU": 1},
    {"CPU": 1, "accel": 1}, {"accel": 2},
])
ops = st.lists(st.tuples(st.sampled_from(["submit", "block", "resume", "finish", "cancel"]),
                         shapes, st.integers(0, 10**6)), max_size=60)


def wid(i: int) -> bytes:
    return i.to_bytes(4, "big")


@settings(max_examples=300, deadline=None)
@given(ops)
def test_lending_gives_back_exactly_the_cpu_and_everything_returns(steps):
    sched = LocalScheduler("n1", TOTAL)
    running: dict[bytes, dict[str, int]] = {}
    blocked: set[bytes] = set()
    submitted: list[bytes] = []

    def take(decisions) -> dict[str, int]:
        """Record dispatches; return what they took, fixed point."""
        took: dict[str, int] = {}
        for d in decisions:
            if isinstance(d, Dispatch):
                running[d.work_id] = dict(d.resources)
                for k, v in d.resources.items():
                    took[k] = took.get(k, 0) + v
        return took

    for n, (op, shape, pick) in enumerate(steps):
        if op == "submit":
            w = wid(n)
            submitted.append(w)
            take(sched.submit(Request(w, "task", shape)))
        elif running and op in ("block", "resume", "finish"):
            w = sorted(running)[pick % len(running)]
            if op == "block":
                before = dict(sched._free)
                took = take(sched.lend(w))
                after = sched._free
                gained = {k: after.get(k, 0) + took.get(k, 0) - before.get(k, 0)
                          for k in set(before) | set(after) | set(took)}
                expect = 0 if w in blocked else running[w].get("CPU", 0)
                assert {k: v for k, v in gained.items() if v} == ({"CPU": expect} if expect else {})
                blocked.add(w)
            elif op == "resume":
                sched.reclaim(w)
                blocked.discard(w)
            else:
                take(sched.finish(w))
                running.pop(w)
                blocked.discard(w)
        elif submitted and op == "cancel":
            w = submitted[pick % len(submitted)]
            take(sched.cancel(w))
            running.pop(w, None)
            blocked.discard(w)
        sched.validate()
        # GPUs and custom resources are never lent, so never held twice over
        assert sum(r.get("GPU", 0) for r in running.values()) <= TOTAL["GPU"] * SCALE
        assert sum(r.get("accel", 0) for r in running.values()) <= TOTAL["accel"] * SCALE
    while running:
        w = sorted(running)[0]
        take(sched.finish(w))
        running.pop(w)
        sched.validate()
    for w in submitted:
        assert not any(isinstance(d, Dispatch) for d in sched.cancel(w))
    sched.validate()
    assert sched.available() == {k: float(v) for k, v in TOTAL.items()}


def test_a_blocked_gpu_task_lends_its_cpu_only():
    sched = LocalScheduler("n1", TOTAL)
    (a,) = sched.submit(Request(b"a", "task", {"CPU": 1, "GPU": 1}))
    assert isinstance(a, Dispatch)
    assert sched.lend(b"a") == []
    assert sched.available() == {"CPU": 2.0, "accel": 2.0}  # the GPU stays with it
    # another GPU task cannot start; a CPU task can
    assert not any(isinstance(d, Dispatch) for d in sched.submit(Request(b"b", "task", {"GPU": 1})))
    assert isinstance(sched.submit(Request(b"c", "task", {"CPU": 2}))[0], Dispatch)
    sched.reclaim(b"a")  # resumes at once: the node is oversubscribed by one CPU
    sched.validate()
    assert sched.available().get("CPU", 0) == 0
    sched.finish(b"c")
    assert sched.available()["CPU"] == 1.0
    (started,) = sched.finish(b"a")
    assert isinstance(started, Dispatch) and started.work_id == b"b"
    sched.finish(b"b")
    sched.validate()
    assert sched.available() == {"CPU": 2.0, "GPU": 1.0, "accel": 2.0}


def test_a_zero_cpu_task_lends_nothing():
    sched = LocalScheduler("n1", {"CPU": 1})
    sched.submit(Request(b"z", "task", {}))
    assert sched.lend(b"z") == []
    sched.validate()
    assert sched.available() == {"CPU": 1.0}
