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
results) stay in the shell. Its tables are in `task_owner_state.py`, the fast paths of the
two events every task makes in `task_owner_fast.py`, its invariants and history in
`task_owner_checks.py`.
"""

from __future__ import annotations

from collections.abc import Hashable

from zmesh.core import task_owner_checks
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
from zmesh.core.task_owner_fast import TaskOwnerFastPaths
from zmesh.core.task_owner_state import (
    MAX_LEASE_REQUESTS,
    PIPELINE_DEPTH,
    LeaseEntry,
    ShapeQueue,
    TaskEntry,
    TaskState,
)

__all__ = [
    "Action", "ArgsReady", "ArmIdle", "Cancel", "CancelOnWorker", "Complete", "Event", "Fail",
    "IdleTimeout", "LeaseFailed", "LeaseGranted", "LeaseRevoked", "MAX_LEASE_REQUESTS",
    "PIPELINE_DEPTH", "Reason", "Rebuild", "Rerun", "RequestLease", "ResolveArgs", "Result",
    "ReturnLease", "Send", "Submit", "TaskOwner", "WorkerExited",
]


class TaskOwner(TaskOwnerFastPaths):
    """Every normal task one owner submitted and has not finished; `handle(event) -> actions`."""

    def handle(self, event: Event) -> list[Action]:
        """Apply one event; return what the shell must do."""
        out: list[Action] = []
        rule = _RULES.get(type(event))
        if rule is None:
            raise TypeError(f"not a task owner event: {event!r}")
        rule(self, event, out)  # type: ignore[operator]
        self.log.append((event, tuple(out)))
        return out

    # -- one rule per event (dispatched by type: every task passes here a few times) -------
    def _args_ready(self, e: ArgsReady, out: list[Action]) -> None:
        t = self.tasks.get(e.task_id)
        if t is not None and t.state is TaskState.WAITING:
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
        return t is not None and t.state is TaskState.INFLIGHT

    # -- rules ---------------------------------------------------------------------------
    def _queue(self, key: Hashable, holds_resources: bool, max_calls: int) -> ShapeQueue:
        q = self.queues.get(key)
        if q is None:
            q = self.queues[key] = ShapeQueue(PIPELINE_DEPTH if holds_resources else 1, max_calls)
        return q

    def _submit(self, e: Submit, out: list[Action]) -> None:
        if e.task_id in self.tasks:
            raise ValueError(f"task {e.task_id.hex()} was already submitted")
        self._queue(e.key, e.holds_resources, e.max_calls)
        t = self.tasks[e.task_id] = TaskEntry(e.key, e.max_retries)
        if not e.waiting:
            self._enqueue(e.task_id, t, out)
            return
        lid = self._chain_lease(e)
        if lid is not None:
            self._send(e.task_id, t, lid, self.leases[lid], out)
            return
        t.state = TaskState.WAITING
        out.append(ResolveArgs(e.task_id))

    def _chain_lease(self, e: Submit) -> bytes | None:
        """The lease running every task that makes this task's missing arguments, if one
        does and takes more tasks: the task follows them there at once, and the worker uses
        the values it made itself. No depth limit: a chain runs one task after another."""
        found: bytes | None = None
        for producer in e.producers:
            p = self.tasks.get(producer)
            if p is None or p.state is not TaskState.INFLIGHT or p.key != e.key:
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

    def _enqueue(self, tid: bytes, t: TaskEntry, out: list[Action], front: bool = False) -> None:
        t.state, t.lease = TaskState.QUEUED, b""
        q = self.queues[t.key]
        if front:
            q.ready.appendleft(tid)
        else:
            q.ready.append(tid)
        self._pump(t.key, q, out)

    def _pump(self, key: Hashable, q: ShapeQueue, out: list[Action]) -> None:
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

    def _send(self, tid: bytes, t: TaskEntry, lid: bytes, lease: LeaseEntry, out: list[Action]) -> None:
        t.state, t.lease = TaskState.INFLIGHT, lid
        lease.inflight[tid] = None
        lease.calls += 1
        lease.stamp += 1  # a pending idle timer no longer counts
        out.append(Send(tid, lid, lease.worker, t.attempt))

    def _return(self, lid: bytes, lease: LeaseEntry, out: list[Action]) -> None:
        del self.leases[lid]
        self.queues[lease.key].leases.remove(lid)
        out.append(ReturnLease(lid, self._spent(lease), lease.granter))

    def _granted(self, e: LeaseGranted, out: list[Action]) -> None:
        if e.lease_id in self.leases:
            return  # a copy of a grant taken already (sent again, or duplicated on the way)
        stale = e.lease_id in self.exited
        key = None if stale else self.requests.pop(e.request_id, None)
        if key is None:  # no longer wanted, or its worker was reported exited
            # A grant of a lease whose worker we were told exited (sent again by its holder,
            # which took none of it for dead): that worker may still run a task we ran there
            # and retried elsewhere. Given back plainly, its node made it idle and granted it
            # again, busy (once to that very task's nested call: a lease leaked for good).
            out.append(ReturnLease(e.lease_id, False, e.sender, stop=stale))
            return
        q = self.queues[key]
        q.requesting -= 1
        lease = self.leases[e.lease_id] = LeaseEntry(key, e.worker,
                                                   granter=e.sender if e.remote else "")
        q.leases.append(e.lease_id)
        if not q.ready:
            self._return(e.lease_id, lease, out)
            return
        self._pump(key, q, out)

    def _worker_exited(self, e: WorkerExited, out: list[Action]) -> None:
        lid, reason = e.lease_id, e.reason
        lease = self.leases.pop(lid, None)
        if lease is not None:
            self.note_exited(lid)  # (a grant of it sent again later is given back, stopped)
        if lease is None:
            # Before its grant: the node that forwarded the request took the holder for dead
            # and placed it again, or the grant was lost on its way here and its worker died.
            # Used, the late grant would run our tasks on a worker that node forgot, and it
            # would take the lease back from under them. The request it answered is asked
            # again (a grant placed again under that request is then given back): when the
            # grant was lost and the holder's worker died, no node places it again, and the
            # tasks behind it waited forever.
            self.note_exited(lid)
            key = self.requests.pop(e.request_id, None) if e.request_id >= 0 else None
            if key is not None:
                q = self.queues[key]
                q.requesting -= 1
                self._pump(key, q, out)
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
            t.state, t.lease = TaskState.QUEUED, b""
            q.ready.appendleft(tid)
        self._pump(lease.key, q, out)

    def _unplace(self, tid: bytes, t: TaskEntry) -> LeaseEntry | None:
        """Take the task out of its queue or lease; the lease it ran on, if any."""
        if t.state is TaskState.QUEUED:
            self.queues[t.key].ready.remove(tid)
            return None
        if t.state is TaskState.INFLIGHT:
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
        if t.state is TaskState.INFLIGHT:  # (again: a later cancel may force it)
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
        t = self.tasks[e.task_id] = TaskEntry(e.key, e.max_retries, e.attempt + 1)
        out.append(Rerun(e.task_id, t.attempt))
        self._enqueue(e.task_id, t, out)

    # -- checks and history --------------------------------------------------------------
    def validate(self) -> None:
        """Check the invariants; AssertionError naming the task or lease and its story."""
        task_owner_checks.validate(self)

    def story(self, key: bytes) -> str:
        """Logged events and actions about a task or a lease, oldest first."""
        return task_owner_checks.story(self, key)



_RULES = {
    Submit: TaskOwner._submit, ArgsReady: TaskOwner._args_ready,
    LeaseGranted: TaskOwner._granted, LeaseFailed: TaskOwner._lease_failed,
    LeaseRevoked: TaskOwner._revoked, WorkerExited: TaskOwner._worker_exited,
    Result: TaskOwner._result, IdleTimeout: TaskOwner._idle_timeout,
    Cancel: TaskOwner._cancel, Rebuild: TaskOwner._rebuild,
}
