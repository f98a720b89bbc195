"""The owner's side of normal tasks as a pure state machine: leases, pipelining, retries.

Tasks of one shape (`key`: resources, strategy, labels, max_calls) share a queue. The owner
asks its node for worker leases (up to `MAX_LEASE_REQUESTS` outstanding per queue), sends
tasks straight to leased workers (`PIPELINE_DEPTH` in flight each; one when the tasks hold
no resources, so that zero-CPU tasks run side by side), retries tasks whose worker died
(`max_retries`, -1 forever) or that raised a retryable exception, and gives a lease back
once it has been idle for a timer's length, when the node revokes it, or when its worker has
run its `max_calls`. Tasks in flight on a worker that dies go back to the front of the
queue in the order they were sent: a chain's later tasks wait for its earlier ones.
No I/O and no clock: the shell (`runtime/owner/submit.py`) feeds events and carries out
actions (both defined in `task_owner_events.py`); task payloads (code, arguments,
results) stay in the shell.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from zmesh.core.task_owner_events import (
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
    WorkerExited,
)

__all__ = [
    "Action", "ArgsReady", "ArmIdle", "Cancel", "CancelOnWorker", "Complete", "Event", "Fail",
    "IdleTimeout", "LeaseFailed", "LeaseGranted", "LeaseRevoked", "MAX_LEASE_REQUESTS",
    "PIPELINE_DEPTH", "Reason", "Rebuild", "Rerun", "RequestLease", "ResolveArgs", "Result",
    "ReturnLease", "Send", "Submit", "TaskOwner", "WorkerExited",
]

PIPELINE_DEPTH = 4
MAX_LEASE_REQUESTS = 16


class _State(Enum):
    WAITING = "waiting"  # for its arguments
    QUEUED = "queued"
    INFLIGHT = "inflight"


@dataclass(slots=True)
class _Task:
    key: Hashable
    max_retries: int
    attempt: int = 0
    state: _State = _State.QUEUED
    lease: bytes = b""
    cancelled: bool = False

    def may_retry(self) -> bool:
        return self.max_retries < 0 or self.attempt < self.max_retries


@dataclass(slots=True)
class _Queue:
    depth: int
    max_calls: int
    ready: deque[bytes] = field(default_factory=deque)
    leases: list[bytes] = field(default_factory=list)
    requesting: int = 0


@dataclass(slots=True)
class _Lease:
    key: Hashable
    worker: str
    inflight: dict[bytes, None] = field(default_factory=dict)  # in the order sent
    calls: int = 0
    stamp: int = 0  # bumped by every task sent: an idle timer armed before is stale
    armed: bool = False  # an idle timer is pending
    revoked: bool = False
    granter: str = ""  # the node that granted it, when not our own: returned there


class TaskOwner:
    """Every normal task one owner submitted and has not finished; `handle(event) -> actions`."""

    def __init__(self, log_size: int = 10_000) -> None:
        self.tasks: dict[bytes, _Task] = {}
        self.queues: dict[Hashable, _Queue] = {}
        self.leases: dict[bytes, _Lease] = {}
        self.requests: dict[int, Hashable] = {}
        self._next_request = 0
        # (event, actions), or a fast path's compact entry (`_FAST_SUBMIT`/`_FAST_RESULT`, ...)
        self.log: deque[tuple[Any, ...]] = deque(maxlen=log_size)

    def handle(self, event: Event) -> list[Action]:
        """Apply one event; return what the shell must do."""
        out: list[Action] = []
        rule = _RULES.get(type(event))
        if rule is None:
            raise TypeError(f"not a task owner event: {event!r}")
        rule(self, event, out)  # type: ignore[operator]
        self.log.append((event, tuple(out)))
        return out

    # -- fast paths: the common cases, by the same rules, without event or action objects --
    def submit_fast(self, task_id: bytes, key: Hashable, max_retries: int,
                    holds_resources: bool = True, max_calls: int = 0) -> Send | bool:
        """`handle(Submit(task_id, key, max_retries, holds_resources, max_calls))` for a task whose arguments are all
        there, when its shape's queue exists and the outcome is at most one `Send`: returns
        that Send, True (queued, nothing to do) or False (not such a case: nothing changed,
        call `handle`). Same state and actions as `handle` (a hypothesis test checks)."""
        q = self.queues.get(key)
        if q is None or task_id in self.tasks:
            return False
        ready, depth, limit = q.ready, q.depth, q.max_calls
        leases = self.leases
        target: _Lease | None = None
        tlid = b""
        for lid in q.leases:
            lease = leases[lid]
            if target is None and len(lease.inflight) < depth and not lease.revoked \
                    and (not limit or lease.calls < limit):
                if ready:
                    return False  # older tasks go first
                target, tlid = lease, lid
            elif not lease.inflight and not lease.armed:
                return False  # the pump would arm its timer
        if target is None and min(len(ready) + 1, MAX_LEASE_REQUESTS) > q.requesting:
            return False  # the pump would ask for a lease
        t = self.tasks[task_id] = _Task(key, max_retries)
        if target is None:
            ready.append(task_id)
            self.log.append((_FAST_SUBMIT, task_id, key, max_retries, holds_resources,
                             max_calls, b"", ""))
            return True
        t.state, t.lease = _State.INFLIGHT, tlid
        target.inflight[task_id] = None
        target.calls += 1
        target.stamp += 1
        self.log.append((_FAST_SUBMIT, task_id, key, max_retries, holds_resources, max_calls,
                         tlid, target.worker))
        return Send(task_id, tlid, target.worker, 0)

    def result_fast(self, task_id: bytes) -> Send | bool:
        """`handle(Result(task_id))` (not retryable) for a task in flight on a lease that is
        neither revoked nor spent, when the outcome is its `Complete` and at most one `Send`
        from its queue onto that lease: returns that Send, True (complete, nothing more) or
        False (not such a case: nothing changed, call `handle`). The caller completes the
        task before sending."""
        t = self.tasks.get(task_id)
        if t is None or t.state is not _State.INFLIGHT:
            return False
        lid = t.lease
        mine = self.leases.get(lid)
        if mine is None or mine.revoked:
            return False
        q = self.queues[t.key]
        ready, depth, limit = q.ready, q.depth, q.max_calls
        if limit and mine.calls >= limit:
            return False
        leases = self.leases
        for other in q.leases:
            lease = leases[other]
            if lease is mine:
                if ready:
                    if len(lease.inflight) != depth or (limit and lease.calls + 1 >= limit):
                        return False  # not exactly one send, or it would be spent
                elif len(lease.inflight) == 1 and not lease.armed:
                    return False  # the pump would arm its timer
            elif ready and len(lease.inflight) < depth and not lease.revoked \
                    and (not limit or lease.calls < limit):
                return False  # another lease has room: it takes a task first
            elif not lease.inflight and not lease.armed:
                return False
        if len(ready) > 1 and min(len(ready) - 1, MAX_LEASE_REQUESTS) > q.requesting:
            return False  # the pump would ask for a lease
        del mine.inflight[task_id]
        del self.tasks[task_id]
        if not ready:
            self.log.append((_FAST_RESULT, task_id, lid, b"", "", 0))
            return True
        nid = ready.popleft()
        n = self.tasks[nid]
        n.state, n.lease = _State.INFLIGHT, lid
        mine.inflight[nid] = None
        mine.calls += 1
        mine.stamp += 1
        self.log.append((_FAST_RESULT, task_id, lid, nid, mine.worker, n.attempt))
        return Send(nid, lid, mine.worker, n.attempt)

    # -- one rule per event (dispatched by type: every task passes here a few times) -------
    def _args_ready(self, e: ArgsReady, out: list[Action]) -> None:
        t = self.tasks.get(e.task_id)
        if t is not None and t.state is _State.WAITING:
            self._enqueue(e.task_id, t, out)

    def _lease_failed(self, e: LeaseFailed, out: list[Action]) -> None:
        key = self.requests.pop(e.request_id, None)
        if key is not None:
            q = self.queues[key]
            q.requesting -= 1
            while q.ready:
                tid = q.ready.popleft()
                del self.tasks[tid]
                out.append(Fail(tid, Reason.LEASE_FAILED, error=e.error))

    def _revoked(self, e: LeaseRevoked, out: list[Action]) -> None:
        lease = self.leases.get(e.lease_id)
        if lease is not None:
            lease.revoked = True
            if not lease.inflight:
                self._return(e.lease_id, lease, out)

    def _idle_timeout(self, e: IdleTimeout, out: list[Action]) -> None:
        """One timer per idle lease: a stale one (the lease worked since) starts another."""
        lease = self.leases.get(e.lease_id)
        if lease is None:
            return
        lease.armed = False
        if lease.inflight or self.queues[lease.key].ready:
            return  # busy: the pump arms a timer when it is idle again
        if lease.stamp == e.stamp:
            self._return(e.lease_id, lease, out)
        else:
            lease.armed = True
            out.append(ArmIdle(e.lease_id, lease.stamp))

    def running(self, task_id: bytes) -> bool:
        """Whether the task is in flight on a worker."""
        t = self.tasks.get(task_id)
        return t is not None and t.state is _State.INFLIGHT

    # -- rules ---------------------------------------------------------------------------
    def _queue(self, key: Hashable, holds_resources: bool, max_calls: int) -> _Queue:
        q = self.queues.get(key)
        if q is None:
            q = self.queues[key] = _Queue(PIPELINE_DEPTH if holds_resources else 1, max_calls)
        return q

    def _submit(self, e: Submit, out: list[Action]) -> None:
        if e.task_id in self.tasks:
            raise ValueError(f"task {e.task_id.hex()} was already submitted")
        self._queue(e.key, e.holds_resources, e.max_calls)
        t = self.tasks[e.task_id] = _Task(e.key, e.max_retries)
        if not e.waiting:
            self._enqueue(e.task_id, t, out)
            return
        lid = self._chain_lease(e)
        if lid is not None:
            self._send(e.task_id, t, lid, self.leases[lid], out)
            return
        t.state = _State.WAITING
        out.append(ResolveArgs(e.task_id))

    def _chain_lease(self, e: Submit) -> bytes | None:
        """The lease running every task that makes this task's missing arguments, if one
        does and takes more tasks: the task follows them there at once, and the worker uses
        the values it made itself. No depth limit: a chain runs one task after another."""
        found: bytes | None = None
        for producer in e.producers:
            p = self.tasks.get(producer)
            if p is None or p.state is not _State.INFLIGHT or p.key != e.key:
                return None
            if found is None:
                found = p.lease
            elif found != p.lease:
                return None
        if found is None:
            return None
        lease = self.leases[found]
        if lease.revoked or self._spent(lease):
            return None
        return found

    def _spent(self, lease: _Lease) -> bool:
        limit = self.queues[lease.key].max_calls
        return bool(limit) and lease.calls >= limit

    def _enqueue(self, tid: bytes, t: _Task, out: list[Action], front: bool = False) -> None:
        t.state, t.lease = _State.QUEUED, b""
        q = self.queues[t.key]
        if front:
            q.ready.appendleft(tid)
        else:
            q.ready.append(tid)
        self._pump(t.key, q, out)

    def _pump(self, key: Hashable, q: _Queue, out: list[Action]) -> None:
        ready, depth, limit = q.ready, q.depth, q.max_calls
        for lid in q.leases:
            lease = self.leases[lid]
            while ready and len(lease.inflight) < depth and not lease.revoked \
                    and (not limit or lease.calls < limit):
                tid = ready.popleft()
                self._send(tid, self.tasks[tid], lid, lease, out)
            if not lease.inflight and not lease.armed:
                lease.armed = True
                out.append(ArmIdle(lid, lease.stamp))
        if ready:
            for _ in range(min(len(ready), MAX_LEASE_REQUESTS) - q.requesting):
                self._next_request += 1
                self.requests[self._next_request] = key
                q.requesting += 1
                out.append(RequestLease(self._next_request, key))

    def _send(self, tid: bytes, t: _Task, lid: bytes, lease: _Lease, out: list[Action]) -> None:
        t.state, t.lease = _State.INFLIGHT, lid
        lease.inflight[tid] = None
        lease.calls += 1
        lease.stamp += 1  # a pending idle timer no longer counts
        out.append(Send(tid, lid, lease.worker, t.attempt))

    def _return(self, lid: bytes, lease: _Lease, out: list[Action]) -> None:
        del self.leases[lid]
        self.queues[lease.key].leases.remove(lid)
        out.append(ReturnLease(lid, self._spent(lease), lease.granter))

    def _granted(self, e: LeaseGranted, out: list[Action]) -> None:
        key = self.requests.pop(e.request_id, None)
        if key is None or e.lease_id in self.leases:
            out.append(ReturnLease(e.lease_id, False, e.sender))
            return
        q = self.queues[key]
        q.requesting -= 1
        lease = self.leases[e.lease_id] = _Lease(key, e.worker,
                                                   granter=e.sender if e.remote else "")
        q.leases.append(e.lease_id)
        if not q.ready:
            self._return(e.lease_id, lease, out)
            return
        self._pump(key, q, out)

    def _worker_exited(self, e: WorkerExited, out: list[Action]) -> None:
        lid, reason = e.lease_id, e.reason
        lease = self.leases.pop(lid, None)
        if lease is None:
            return
        q = self.queues[lease.key]
        q.leases.remove(lid)
        retry: list[bytes] = []
        for tid in lease.inflight:  # in the order they were sent
            t = self.tasks[tid]
            if t.cancelled:
                del self.tasks[tid]
                out.append(Fail(tid, Reason.CANCELLED))
            elif t.may_retry():
                t.attempt += 1
                retry.append(tid)
            else:
                del self.tasks[tid]
                out.append(Fail(tid, Reason.WORKER_DIED, reason, t.attempt))
        for tid in reversed(retry):  # ahead of the queue, keeping their order
            t = self.tasks[tid]
            t.state, t.lease = _State.QUEUED, b""
            q.ready.appendleft(tid)
        self._pump(lease.key, q, out)

    def _unplace(self, tid: bytes, t: _Task) -> _Lease | None:
        """Take the task out of its queue or lease; the lease it ran on, if any."""
        if t.state is _State.QUEUED:
            self.queues[t.key].ready.remove(tid)
            return None
        if t.state is _State.INFLIGHT:
            lease = self.leases.get(t.lease)
            if lease is not None:
                del lease.inflight[tid]
            return lease
        return None

    def _result(self, e: Result, out: list[Action]) -> None:
        tid, retryable = e.task_id, e.retryable
        t = self.tasks.get(tid)
        if t is None:
            return
        lid = t.lease
        lease = self._unplace(tid, t)
        if retryable and t.may_retry() and not t.cancelled:
            t.attempt += 1
            self._enqueue(tid, t, out)
        else:
            del self.tasks[tid]
            out.append(Complete(tid))
        if lease is not None:
            if (lease.revoked or self._spent(lease)) and not lease.inflight:
                self._return(lid, lease, out)
            self._pump(lease.key, self.queues[lease.key], out)

    def _cancel(self, e: Cancel, out: list[Action]) -> None:
        tid = e.task_id
        t = self.tasks.get(tid)
        if t is None:
            return
        if t.state is _State.INFLIGHT:  # (again: a later cancel may force it)
            t.cancelled = True
            out.append(CancelOnWorker(tid, self.leases[t.lease].worker))
            return
        self._unplace(tid, t)
        del self.tasks[tid]
        out.append(Fail(tid, Reason.CANCELLED_BEFORE_RUN))

    def _rebuild(self, e: Rebuild, out: list[Action]) -> None:
        if e.task_id in self.tasks:
            return  # already running again
        if not (e.max_retries < 0 or e.attempt < e.max_retries):
            return  # no retries left: its returns keep their error
        self._queue(e.key, e.holds_resources, e.max_calls)
        t = self.tasks[e.task_id] = _Task(e.key, e.max_retries, e.attempt + 1)
        out.append(Rerun(e.task_id, t.attempt))
        self._enqueue(e.task_id, t, out)

    # -- checks and history --------------------------------------------------------------
    def validate(self) -> None:
        """Check the invariants; AssertionError naming the task or lease and its story."""
        placed: dict[bytes, str] = {}

        def place(tid: bytes, where: str) -> None:
            assert tid not in placed, \
                f"task {tid.hex()} is {placed[tid]} and {where}\n{self.story(tid)}"
            placed[tid] = where

        for key, q in self.queues.items():
            for tid in q.ready:
                place(tid, f"queued on {key!r}")
                t = self.tasks.get(tid)
                assert t is not None and t.state is _State.QUEUED and t.key == key, \
                    f"queued task {tid.hex()} is not a queued task of its shape\n{self.story(tid)}"
            asked = sum(1 for k in self.requests.values() if k == key)
            assert q.requesting == asked, f"queue {key!r} counts {q.requesting} requests, {asked}"
            assert q.requesting <= MAX_LEASE_REQUESTS, f"queue {key!r} asks too much"
            if q.ready:
                assert q.requesting >= min(len(q.ready), MAX_LEASE_REQUESTS), \
                    f"queue {key!r} has tasks waiting but asks for too few leases"
            for lid in q.leases:
                lease = self.leases.get(lid)
                assert lease is not None and lease.key == key, f"lease {lid.hex()} misfiled"
                if q.ready:
                    full = len(lease.inflight) >= q.depth or lease.revoked or \
                        self._spent(lease)
                    assert full, f"lease {lid.hex()} has room while {key!r} waits\n" \
                        f"{self.story(lid)}"
        for lid, lease in self.leases.items():
            assert lid in self.queues[lease.key].leases, f"lease {lid.hex()} not in its queue"
            for tid in lease.inflight:
                place(tid, f"in flight on lease {lid.hex()}")
                t = self.tasks.get(tid)
                assert t is not None and t.state is _State.INFLIGHT and t.lease == lid, \
                    f"task {tid.hex()} in flight on a lease it does not know\n{self.story(tid)}"
        for tid, t in self.tasks.items():
            assert t.max_retries < 0 or t.attempt <= t.max_retries, \
                f"task {tid.hex()} ran more attempts than allowed\n{self.story(tid)}"
            if t.state is _State.WAITING:
                place(tid, "waiting for its arguments")
            assert tid in placed, f"task {tid.hex()} is nowhere\n{self.story(tid)}"
            assert not t.cancelled or t.state is _State.INFLIGHT, \
                f"cancelled task {tid.hex()} still waits to run\n{self.story(tid)}"

    def story(self, key: bytes) -> str:
        """Logged events and actions about a task or a lease, oldest first."""
        def about(item: Event | Action) -> bool:
            return key in (getattr(item, "task_id", None), getattr(item, "lease_id", None)) \
                or key in getattr(item, "producers", ())
        lines = [f"{e!r} -> {list(acts)!r}" for e, acts in map(_expand, self.log)
                 if about(e) or any(about(a) for a in acts)]
        return "\n".join(lines) or f"(no events about {key.hex()})"


_FAST_SUBMIT = "submit"
_FAST_RESULT = "result"


def _expand(entry: tuple[Any, ...]) -> tuple[Event, tuple[Action, ...]]:
    """A log entry as (event, actions): a fast path's compact entry rebuilt as handle's."""
    if entry[0] is _FAST_SUBMIT:
        _, tid, key, retries, holds, calls, lid, worker = entry
        return Submit(tid, key, retries, holds, calls), (Send(tid, lid, worker, 0),) if lid else ()
    if entry[0] is _FAST_RESULT:
        _, tid, lid, nid, worker, attempt = entry
        done = Complete(tid)
        return Result(tid), (done, Send(nid, lid, worker, attempt)) if nid else (done,)
    return entry[0], entry[1]


_RULES = {
    Submit: TaskOwner._submit, ArgsReady: TaskOwner._args_ready,
    LeaseGranted: TaskOwner._granted, LeaseFailed: TaskOwner._lease_failed,
    LeaseRevoked: TaskOwner._revoked, WorkerExited: TaskOwner._worker_exited,
    Result: TaskOwner._result, IdleTimeout: TaskOwner._idle_timeout,
    Cancel: TaskOwner._cancel, Rebuild: TaskOwner._rebuild,
}
