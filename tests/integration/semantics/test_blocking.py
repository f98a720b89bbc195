"""Blocking calls as Ray: `get` of a list fails fast, `max_pending_calls` back-pressure."""

from __future__ import annotations

import threading

import pytest

from zmesh.exceptions import PendingCallsLimitExceeded


def test_get_of_a_list_raises_as_soon_as_one_ref_failed(ray):
    # docs (ray.get): "If any of the objects ... raised an exception, the exception is
    # raised"; observed Ray behaviour (test_basic: get of [slow, failing] raises while the
    # slow task still runs).
    @ray.remote
    class Gate:
        def __init__(self):
            self.ev = threading.Event()

        def wait(self):
            self.ev.wait(60)
            return "released"

        def open(self):
            self.ev.set()

    @ray.remote(num_cpus=0)
    def fail():
        raise ValueError("early")

    gate = Gate.options(max_concurrency=2).remote()
    slow = gate.wait.remote()
    with pytest.raises(ValueError, match="early"):
        ray.get([slow, fail.remote()], timeout=30)
    ray.get(gate.open.remote(), timeout=30)
    assert ray.get(slow, timeout=30) == "released"


def test_get_of_a_list_still_raises_the_first_failure_in_order(ray):
    # observed Ray behaviour: with several failures ready, the first one in the list raises
    @ray.remote(num_cpus=0)
    def fail(tag):
        raise KeyError(tag)

    a, b = fail.remote("a"), fail.remote("b")
    ray.wait([a, b], num_returns=2, timeout=30)
    with pytest.raises(KeyError, match="a"):
        ray.get([a, b], timeout=30)


def test_max_pending_calls_raises_past_the_limit(ray):
    # checked against Ray 2.60 (tools/ray_parity.py, max_pending_calls_raises_past_the_limit);
    # docs (actor options, max_pending_calls): "the max number of pending calls allowed on
    # the actor handle ... raises PendingCallsLimitExceeded"
    @ray.remote
    class Gate:
        def __init__(self):
            self.ev = threading.Event()

        def wait(self):
            self.ev.wait(60)
            return 1

        def open(self):
            self.ev.set()

    gate = Gate.options(max_pending_calls=3, max_concurrency=4).remote()
    refs = [gate.wait.remote() for _ in range(3)]
    with pytest.raises(PendingCallsLimitExceeded):
        gate.wait.remote()

    # a handle passed to a task counts its own pending calls (Ray counts per handle): its
    # first call goes through and opens the gate
    @ray.remote(num_cpus=0)
    def open_it(h):
        ray.get(h.open.remote())

    ray.get(open_it.remote(gate), timeout=30)
    assert ray.get(refs, timeout=30) == [1, 1, 1]
    assert ray.get(gate.wait.remote(), timeout=30) == 1  # room again once calls finished


def test_max_pending_calls_is_validated(ray):
    # ray source (ray_option_utils: max_pending_calls must be -1 or positive)
    @ray.remote
    class A:
        pass

    with pytest.raises(ValueError):
        A.options(max_pending_calls=0).remote()


def test_max_pending_calls_holds_for_a_passed_handle_and_one_got_by_name(ray):
    # checked against Ray 2.60 (tools/ray_parity.py, max_pending_calls_through_a_passed_handle);
    # ray source (the ActorHandle proto carries max_pending_calls, so a serialized handle and
    # a named handle from the GCS keep it); the count is per actor in each process (Ray's
    # ActorTaskSubmitter queue), so every handle in the driver shares it
    @ray.remote
    class Gate:
        def __init__(self):
            self.ev = threading.Event()

        def wait(self):
            self.ev.wait(60)
            return 1

        def open(self):
            self.ev.set()

    gate = Gate.options(name="limited-gate", max_pending_calls=2, max_concurrency=8).remote()

    @ray.remote(num_cpus=0)
    def overfill(h):
        refs = [h.wait.remote() for _ in range(2)]
        try:
            h.wait.remote()
        except PendingCallsLimitExceeded:
            return "limited", len(refs)
        return "unlimited", len(refs)

    assert ray.get(overfill.remote(gate), timeout=30) == ("limited", 2)
    named = ray.get_actor("limited-gate")
    held = [named.wait.remote() for _ in range(2)]
    with pytest.raises(PendingCallsLimitExceeded):
        named.wait.remote()
    with pytest.raises(PendingCallsLimitExceeded):
        gate.open.remote()  # the creating handle shares the driver's count

    @ray.remote(num_cpus=0)
    class Opener:  # a process of its own: the task's worker still counts overfill's calls
        def open(self, h):
            ray.get(h.open.remote())

    ray.get(Opener.remote().open.remote(gate), timeout=30)
    assert ray.get(held, timeout=30) == [1, 1]
    ray.kill(gate)
