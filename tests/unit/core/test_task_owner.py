"""The task-owner core alone: scripted cases for each rule, and hypothesis driving random
events (submissions, grants, results, worker deaths, revocations, timers, cancels, rebuilds)
against a model of the node and its workers, with validate() after every step."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from zmesh.core.task_owner import (
    MAX_LEASE_REQUESTS,
    PIPELINE_DEPTH,
    Action,
    ArgsReady,
    ArmIdle,
    Cancel,
    CancelOnWorker,
    Complete,
    Event,
    Fail,
    IdleTimeout,
    LeaseFailed,
    LeaseGranted,
    LeaseRevoked,
    Reason,
    Rebuild,
    RequestLease,
    Rerun,
    ResolveArgs,
    Result,
    ReturnLease,
    Send,
    Submit,
    TaskOwner,
    WorkerExited,
)

KEY = ("cpu",)


def sends(actions: list[Action]) -> list[bytes]:
    return [a.task_id for a in actions if isinstance(a, Send)]


def granted(core: TaskOwner, actions: list[Action], lease: bytes) -> list[Action]:
    rid = next(a.request_id for a in actions if isinstance(a, RequestLease))
    return core.handle(LeaseGranted(rid, lease, "w-" + lease.decode(), "node"))


def test_tasks_of_a_dead_worker_run_again_in_the_order_they_were_sent() -> None:
    core = TaskOwner()
    first = core.handle(Submit(b"t0", KEY, 3))
    for i in range(1, 4):
        core.handle(Submit(b"t%d" % i, KEY, 3))
    assert sends(granted(core, first, b"L1")) == [b"t0", b"t1", b"t2", b"t3"]
    core.handle(Submit(b"t4", KEY, 3))  # queued behind the full lease
    out = core.handle(WorkerExited(b"L1", "killed"))
    core.validate()
    again = granted(core, out, b"L2")
    assert sends(again) == [b"t0", b"t1", b"t2", b"t3"]  # ahead of t4, in their order
    assert [a.attempt for a in again if isinstance(a, Send)] == [1, 1, 1, 1]
    core.validate()


def test_a_task_without_retries_fails_when_its_worker_dies() -> None:
    core = TaskOwner()
    out = granted(core, core.handle(Submit(b"t", KEY, 0)), b"L")
    assert sends(out) == [b"t"]
    out = core.handle(WorkerExited(b"L", "oom"))
    assert out == [Fail(b"t", Reason.WORKER_DIED, "oom", 0)]
    assert not core.tasks
    core.validate()


def test_max_retries_minus_one_retries_forever() -> None:
    core = TaskOwner()
    out = core.handle(Submit(b"t", KEY, -1))
    for i in range(50):
        out = granted(core, out, b"L%d" % i)
        assert sends(out) == [b"t"]
        out = core.handle(WorkerExited(b"L%d" % i, "killed"))
        assert not any(isinstance(a, Fail) for a in out)
        core.validate()


def test_a_retryable_exception_runs_the_task_again_until_retries_run_out() -> None:
    core = TaskOwner()
    out = granted(core, core.handle(Submit(b"t", KEY, 1)), b"L")
    out = core.handle(Result(b"t", retryable=True))
    assert sends(out) == [b"t"] and Complete(b"t") not in out
    out = core.handle(Result(b"t", retryable=True))
    assert Complete(b"t") in out
    core.validate()


def test_zero_resource_tasks_get_one_worker_each() -> None:
    core = TaskOwner()
    outs = [core.handle(Submit(b"t%d" % i, ("zero",), 0, holds_resources=False))
            for i in range(3)]
    requests = [a for out in outs for a in out if isinstance(a, RequestLease)]
    assert len(requests) == 3
    out = core.handle(LeaseGranted(requests[0].request_id, b"L", "w", "node"))
    assert sends(out) == [b"t0"]  # depth 1
    core.validate()


def test_pipelining_depth_and_lease_request_cap() -> None:
    core = TaskOwner()
    out: list[Action] = []
    for i in range(40):
        out += core.handle(Submit(b"t%d" % i, KEY, 0))
    requests = [a for a in out if isinstance(a, RequestLease)]
    assert len(requests) == MAX_LEASE_REQUESTS
    out = core.handle(LeaseGranted(requests[0].request_id, b"L", "w", "node"))
    assert len(sends(out)) == PIPELINE_DEPTH
    core.validate()


def test_idle_lease_goes_back_after_its_timer_and_a_busy_spell_restarts_the_timer() -> None:
    core = TaskOwner()
    out = granted(core, core.handle(Submit(b"t", KEY, 0)), b"L")
    out = core.handle(Result(b"t"))
    first = next(a for a in out if isinstance(a, ArmIdle))
    out = core.handle(Submit(b"u", KEY, 0))  # busy again before the timer runs out
    assert sends(out) == [b"u"]
    out = core.handle(Result(b"u"))
    assert not any(isinstance(a, ArmIdle) for a in out)  # one timer per lease at a time
    again = core.handle(IdleTimeout(b"L", first.stamp))  # stale: it worked since
    assert again == [ArmIdle(b"L", first.stamp + 1)]
    assert core.handle(IdleTimeout(b"L", first.stamp + 1)) == [ReturnLease(b"L")]
    core.validate()


def test_revoked_lease_goes_back_once_its_tasks_are_done() -> None:
    core = TaskOwner()
    out = granted(core, core.handle(Submit(b"t", KEY, 0)), b"L")
    assert core.handle(LeaseRevoked(b"L")) == []
    out = core.handle(Result(b"t"))
    assert ReturnLease(b"L") in out
    core.validate()


def test_an_unknown_grant_goes_back_to_its_sender() -> None:
    core = TaskOwner()
    assert core.handle(LeaseGranted(99, b"L", "w", "other-node")) == [
        ReturnLease(b"L", False, "other-node")]


def test_a_copy_of_a_grant_already_taken_is_ignored_not_returned() -> None:
    # A node sends a forwarded lease's grant again each period (the first may have been
    # lost), and the network may duplicate it. A copy used to be taken for an unwanted grant
    # and returned: the node freed a worker that was still running this owner's tasks.
    core = TaskOwner()
    granted(core, core.handle(Submit(b"t", KEY, 0)), b"L")
    assert core.handle(LeaseGranted(1, b"L", "w", "other-node", True)) == []
    assert b"L" in core.leases
    core.validate()


def test_a_grant_that_comes_after_its_worker_was_reported_exited_is_given_back() -> None:
    # Seed 919236779: the node that forwarded our request took the holder for dead, told us
    # the lease's worker exited (before its grant reached us) and placed the request again.
    # The late grant was used: our tasks ran on a worker that node no longer knew of, and it
    # took the lease back from under them (the tree's get hung). It is given back now.
    core = TaskOwner()
    out = core.handle(Submit(b"t", KEY, 0))
    rid = next(a.request_id for a in out if isinstance(a, RequestLease))
    assert core.handle(WorkerExited(b"L", "its node died")) == []
    assert core.handle(LeaseGranted(rid, b"L", "w", "n1", True)) == [
        ReturnLease(b"L", False, "n1", stop=True)]
    out = core.handle(LeaseGranted(rid, b"M", "w2", "n2", True))  # the request placed again
    assert sends(out) == [b"t"]
    core.validate()


def test_a_request_whose_grant_never_came_and_whose_worker_died_is_asked_again() -> None:
    # Random hand_on schedule (seed 3485077201): both copies of a grant (to us and to the
    # origin node) were dropped, then the holder's worker was killed. The holder told us the
    # lease's worker exited and the origin that the lease was done; no node placed the
    # request again, and we waited for its grant forever (a get hung). The exit now names
    # the request: still waiting for it, we ask again; the lost lease, if its grant comes
    # after all, is given back.
    core = TaskOwner()
    out = core.handle(Submit(b"t", KEY, 0))
    rid = next(a.request_id for a in out if isinstance(a, RequestLease))
    out = core.handle(WorkerExited(b"L", "its worker was killed", rid))
    again = [a for a in out if isinstance(a, RequestLease)]
    assert len(again) == 1 and again[0].request_id != rid
    core.validate()
    assert core.handle(LeaseGranted(rid, b"L", "w", "n1", True)) == [
        ReturnLease(b"L", False, "n1", stop=True)]
    out = core.handle(LeaseGranted(again[0].request_id, b"M", "w2", "n1", True))
    assert sends(out) == [b"t"]
    core.validate()
    # an exit naming a request no longer waited for (granted, or asked again) changes nothing
    assert core.handle(WorkerExited(b"N", "killed", rid)) == []
    core.validate()


def test_a_grant_sent_again_for_a_lease_whose_worker_exited_under_our_task_stops_it() -> None:
    # Random hand_on schedule (seed 1672984134): we ran a task on a lease, were told its
    # worker exited (its holder node was taken for dead, wrongly) and retried the task
    # elsewhere; the holder, alive, granted the lease again. Given back plainly, the holder
    # made the worker idle while it still ran our abandoned task, and granted it again. It
    # is given back to be stopped now.
    core = TaskOwner()
    out = core.handle(Submit(b"t", KEY, 3))
    rid = next(a.request_id for a in out if isinstance(a, RequestLease))
    assert sends(core.handle(LeaseGranted(rid, b"L", "w", "n1", True))) == [b"t"]
    again = core.handle(WorkerExited(b"L", "its node died", rid))
    assert [a for a in again if isinstance(a, RequestLease)]  # the task goes elsewhere
    assert core.handle(LeaseGranted(rid, b"L", "w", "n1", True)) == [
        ReturnLease(b"L", False, "n1", stop=True)]
    core.validate()


def test_lease_failure_fails_the_queued_tasks() -> None:
    core = TaskOwner()
    out = core.handle(Submit(b"t", KEY, 3))
    rid = next(a.request_id for a in out if isinstance(a, RequestLease))
    assert core.handle(LeaseFailed(rid, b"err")) == [
        Fail(b"t", Reason.LEASE_FAILED, error=b"err")]
    core.validate()


def test_cancel_before_running_fails_at_once_and_while_running_asks_the_worker() -> None:
    core = TaskOwner()
    core.handle(Submit(b"a", KEY, 0, waiting=True))
    assert core.handle(Cancel(b"a")) == [Fail(b"a", Reason.CANCELLED_BEFORE_RUN)]
    assert core.handle(ArgsReady(b"a")) == []  # resolved after the cancel: nothing runs
    granted(core, core.handle(Submit(b"b", KEY, 3)), b"L")
    assert core.handle(Cancel(b"b")) == [CancelOnWorker(b"b", "w-L")]
    assert core.handle(WorkerExited(b"L", "killed")) == [Fail(b"b", Reason.CANCELLED)]
    core.validate()


def test_a_task_follows_its_producer_onto_its_lease() -> None:
    core = TaskOwner()
    granted(core, core.handle(Submit(b"p", KEY, 0)), b"L")
    out = core.handle(Submit(b"c", KEY, 0, waiting=True, producers=(b"p",)))
    assert out == [Send(b"c", b"L", "w-L", 0)]
    out = core.handle(Submit(b"d", ("other",), 0, waiting=True, producers=(b"p",)))
    assert out == [ResolveArgs(b"d")]  # another shape: waits for the value
    core.validate()


def test_rebuild_runs_a_finished_task_again_within_its_retries() -> None:
    core = TaskOwner()
    out = core.handle(Rebuild(b"t", KEY, 2, attempt=0))
    assert out[0] == Rerun(b"t", 1)
    assert core.handle(Rebuild(b"t", KEY, 2, attempt=0)) == []  # already rebuilding
    assert core.handle(Rebuild(b"u", KEY, 2, attempt=2)) == []  # no retries left
    core.validate()


# -- hypothesis --------------------------------------------------------------------------
KEYS = [("cpu",), ("gpu",), ("zero",)]


class OwnerMachine(RuleBasedStateMachine):
    """The core against a model node (grants or fails requests) and model workers (each
    runs what it was sent, in order)."""

    def __init__(self) -> None:
        super().__init__()
        self.core = TaskOwner(log_size=2_000)
        self.n = 0
        self.leases = 0
        self.requests: list[int] = []  # outstanding, in the order made
        self.live: dict[bytes, list[bytes]] = {}  # lease -> tasks sent to it, not answered
        self.ended: set[bytes] = set()
        self.open: dict[bytes, tuple[tuple[str, ...], int, int]] = {}  # task -> key, retries, att
        self.finished: dict[bytes, tuple[tuple[str, ...], int, int]] = {}
        self.waiting: list[bytes] = []
        self.timers: list[tuple[bytes, int]] = []
        self.order_checks: list[list[bytes]] = []  # retried groups, in their sent order

    def apply(self, event: Event) -> list[Action]:
        return self.core.handle(event)

    def step(self, event: Event) -> list[Action]:
        out = self.apply(event)
        for a in out:
            match a:
                case Send(tid, lid, _w, attempt):
                    assert tid in self.open and tid not in self.ended
                    assert lid in self.live, f"sent to a lease that is gone\n{self.core.story(tid)}"
                    assert attempt == self.open[tid][2] or attempt == self.open[tid][2] + 1
                    self.open[tid] = (self.open[tid][0], self.open[tid][1], attempt)
                    self.live[lid].append(tid)
                    for group in self.order_checks:
                        if tid in group:
                            assert group[0] == tid, f"{tid!r} re-sent before {group[0]!r}, " \
                                f"sent before it\n{self.core.story(tid)}"
                            group.remove(tid)
                case Complete(tid) | Fail(tid):
                    assert tid in self.open and tid not in self.ended, \
                        f"ended twice\n{self.core.story(tid)}"
                    self.ended.add(tid)
                    self.finished[tid] = self.open.pop(tid)
                    for group in self.order_checks:
                        if tid in group:
                            group.remove(tid)
                    for tasks in self.live.values():
                        if tid in tasks:
                            tasks.remove(tid)
                case RequestLease(rid, _k):
                    self.requests.append(rid)
                case ReturnLease(lid, _r, to):
                    if not to:
                        assert not self.live.pop(lid), "returned a lease with tasks on it"
                case ArmIdle(lid, stamp):
                    self.timers.append((lid, stamp))
                case ResolveArgs(tid):
                    self.waiting.append(tid)
                case Rerun(tid, attempt):
                    key, retries, _ = self.finished.pop(tid)
                    self.ended.discard(tid)
                    self.open[tid] = (key, retries, attempt)
                case CancelOnWorker(tid, _w):
                    pass
                case _:
                    raise AssertionError(a)
        self.core.validate()
        return out

    @rule(k=st.sampled_from(KEYS), retries=st.sampled_from([0, 1, 2, -1]),
          waiting=st.booleans(), follow=st.booleans())
    def submit(self, k: tuple[str, ...], retries: int, waiting: bool, follow: bool) -> None:
        tid = b"t%d" % self.n
        self.n += 1
        self.open[tid] = (k, retries, 0)
        producers: tuple[bytes, ...] = ()
        if waiting and follow and self.open:
            producers = (sorted(self.open)[0],)
        self.step(Submit(tid, k, retries, holds_resources=k != ("zero",), waiting=waiting,
                         producers=producers))

    @rule(data=st.data())
    def args_ready(self, data: st.DataObject) -> None:
        if self.waiting:
            tid = self.waiting.pop(data.draw(st.integers(0, len(self.waiting) - 1)))
            self.step(ArgsReady(tid))

    @rule(data=st.data(), fail=st.booleans())
    def answer_request(self, data: st.DataObject, fail: bool) -> None:
        if not self.requests:
            return
        rid = self.requests.pop(data.draw(st.integers(0, len(self.requests) - 1)))
        if fail and data.draw(st.integers(0, 9)) == 0:
            self.step(LeaseFailed(rid, b"no"))
            return
        self.leases += 1
        lid = b"L%d" % self.leases
        self.live[lid] = []
        self.step(LeaseGranted(rid, lid, "w" + lid.decode(), "node"))

    @rule(data=st.data(), retryable=st.booleans())
    def worker_answers(self, data: st.DataObject, retryable: bool) -> None:
        busy = sorted(lid for lid, tasks in self.live.items() if tasks)
        if busy:
            lid = data.draw(st.sampled_from(busy))
            tid = self.live[lid].pop(0)  # a worker runs its tasks in order
            self.step(Result(tid, retryable))

    @rule(data=st.data())
    def worker_dies(self, data: st.DataObject) -> None:
        if not self.live:
            return
        lid = data.draw(st.sampled_from(sorted(self.live)))
        tasks = list(self.live.pop(lid))
        # the tasks retried must be sent again in the order they were sent (checked in step)
        self.order_checks.append(tasks)
        self.step(WorkerExited(lid, "killed"))
        self.order_checks = [g for g in self.order_checks if g]

    @rule(data=st.data())
    def revoke(self, data: st.DataObject) -> None:
        if self.live:
            self.step(LeaseRevoked(data.draw(st.sampled_from(sorted(self.live)))))

    @rule(data=st.data())
    def timer(self, data: st.DataObject) -> None:
        if self.timers:
            lid, stamp = self.timers.pop(data.draw(st.integers(0, len(self.timers) - 1)))
            self.step(IdleTimeout(lid, stamp))

    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        if self.open:
            self.step(Cancel(data.draw(st.sampled_from(sorted(self.open)))))

    @rule(data=st.data())
    def rebuild(self, data: st.DataObject) -> None:
        if self.finished:
            tid = data.draw(st.sampled_from(sorted(self.finished)))
            key, retries, attempt = self.finished[tid]
            self.step(Rebuild(tid, key, retries, attempt, holds_resources=key != ("zero",)))

    @invariant()
    def every_open_task_is_tracked(self) -> None:
        assert set(self.open) == set(self.core.tasks)

    def teardown(self) -> None:
        """Answer everything, with no more faults: every task ends."""
        for _ in range(10_000):
            if self.waiting:
                self.step(ArgsReady(self.waiting.pop()))
            elif self.requests:
                self.leases += 1
                lid = b"L%d" % self.leases
                self.live[lid] = []
                self.step(LeaseGranted(self.requests.pop(0), lid, "w", "node"))
            elif any(self.live.values()):
                lid = next(lid for lid, tasks in self.live.items() if tasks)
                self.step(Result(self.live[lid].pop(0)))
            else:
                break
        assert not self.open, f"tasks never ended: {sorted(self.open)}\n" + "\n".join(
            self.core.story(t) for t in self.open)


OwnerMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=50,
                                          deadline=None)
TestTaskOwner = OwnerMachine.TestCase


# -- the fast paths agree with handle() ------------------------------------------------------
def snapshot(core: TaskOwner) -> tuple[object, ...]:
    return (core.tasks, {k: (q.depth, q.max_calls, list(q.ready), q.leases, q.requesting)
                         for k, q in core.queues.items()}, core.leases, core.requests,
            core._next_request)


class FastPathMachine(OwnerMachine):
    """The same random runs, each event also fed to a twin core that takes its fast path
    for a submission (with its arguments there, or chained after the tasks that make them)
    and a result that is not retryable: the
    twin must return the same actions and reach the same state, and tell the same story."""

    def __init__(self) -> None:
        super().__init__()
        self.twin = TaskOwner(log_size=2_000)
        self.fast = 0

    def apply(self, event: Event) -> list[Action]:
        out = self.core.handle(event)
        twin = self.twin
        got: Send | bool = False
        if isinstance(event, Submit) and not event.waiting:
            got = twin.submit_fast(event.task_id, event.key, event.max_retries,
                                   event.holds_resources, event.max_calls)
            mine = [] if got is True else [got]
        elif isinstance(event, Submit):
            got = twin.submit_chained(event.task_id, event.key, event.max_retries,
                                      event.holds_resources, event.max_calls, event.producers)
            mine = [got]
        elif isinstance(event, Result) and not event.retryable:
            got = twin.result_fast(event.task_id)
            mine = [Complete(event.task_id)] + ([] if got is True else [got])
        if got is False:
            mine = twin.handle(event)
        else:
            self.fast += 1
        assert mine == out, f"{event!r}: fast {mine!r}, handle {out!r}"
        assert snapshot(twin) == snapshot(self.core), f"{event!r}: states differ"
        twin.validate()
        for tid in {getattr(a, "task_id", b"") for a in out} - {b""}:
            assert twin.story(tid) == self.core.story(tid)
        return out


FastPathMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=50,
                                             deadline=None)
TestFastPaths = FastPathMachine.TestCase


def test_fast_paths_take_the_common_cases() -> None:
    core = TaskOwner()
    assert core.submit_fast(b"a", ("cpu",), 0) is False  # no queue yet
    [req] = core.handle(Submit(b"a", ("cpu",), 0))
    assert isinstance(req, RequestLease)
    assert core.submit_fast(b"b", ("cpu",), 0) is False  # the pump would ask for a lease
    assert core.tasks.keys() == {b"a"}  # (and nothing changed)
    assert sends(core.handle(LeaseGranted(req.request_id, b"L", "w", "node"))) == [b"a"]
    assert core.submit_fast(b"c", ("cpu",), 0) == Send(b"c", b"L", "w", 0)
    assert core.result_fast(b"a") is True
    assert core.result_fast(b"c") is False  # the lease goes idle: handle() arms its timer
    assert core.handle(Result(b"c")) == [Complete(b"c"), ArmIdle(b"L", 2)]
    assert core.submit_fast(b"d", ("cpu",), 0) == Send(b"d", b"L", "w", 0)
    core.validate()
    assert "Send(task_id=b'c'" in core.story(b"c") and "Complete(task_id=b'c')" in \
        core.story(b"c")
