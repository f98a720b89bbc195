"""The task-owner core's fast paths: the two events every task makes (its submission with its
arguments there, its result that is not retried), by the same rules as `TaskOwner.handle`
but without event or action objects, when the outcome is at most one `Send`. A hypothesis
test (tests/unit/core/test_task_owner.py) checks that they leave the same state and log."""

from __future__ import annotations

from collections.abc import Hashable

from zmesh.core.task_owner_events import Send
from zmesh.core.task_owner_state import (
    FAST_CHAIN,
    FAST_RESULT,
    FAST_SUBMIT,
    MAX_LEASE_REQUESTS,
    LeaseEntry,
    TaskEntry,
    TaskOwnerState,
    TaskState,
)


class TaskOwnerFastPaths(TaskOwnerState):
    """`submit_fast` and `result_fast`: each returns a Send, True (done, nothing to send) or
    False (not its case: nothing changed, call `handle`)."""

    def submit_fast(self, task_id: bytes, key: Hashable, max_retries: int,
                    holds_resources: bool = True, max_calls: int = 0) -> Send | bool:
        """`handle(Submit(task_id, key, max_retries, holds_resources, max_calls))` for a task
        whose arguments are all there, when its shape's queue exists and the outcome is at most one `Send`: returns
        that Send, True (queued, nothing to do) or False (not such a case: nothing changed,
        call `handle`). Same state and actions as `handle` (a hypothesis test checks)."""
        q = self.queues.get(key)
        if q is None or task_id in self.tasks:
            return False
        ready, depth, limit = q.ready, q.depth, q.max_calls
        leases = self.leases
        target: LeaseEntry | None = None
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
        t = self.tasks[task_id] = TaskEntry(key, max_retries)
        if target is None:
            ready.append(task_id)
            self.log.append((FAST_SUBMIT, task_id, key, max_retries, holds_resources,
                             max_calls, b"", ""))
            return True
        t.state, t.lease = TaskState.INFLIGHT, tlid
        target.inflight[task_id] = None
        target.calls += 1
        target.stamp += 1
        self.log.append((FAST_SUBMIT, task_id, key, max_retries, holds_resources, max_calls,
                         tlid, target.worker))
        return Send(task_id, tlid, target.worker, 0)

    def submit_chained(self, task_id: bytes, key: Hashable, max_retries: int,
                       holds_resources: bool, max_calls: int, producers: tuple[bytes, ...]
                       ) -> Send | bool:
        """`handle(Submit(..., waiting=True, producers=producers))` for a task whose missing
        arguments are all made on one lease of its shape that takes more tasks (a chain):
        returns the Send that makes it follow them there, or False (not such a case:
        nothing changed, call `handle`)."""
        if key not in self.queues or task_id in self.tasks or not producers:
            return False
        tasks = self.tasks
        found = b""
        for producer in producers:
            p = tasks.get(producer)
            if p is None or p.state is not TaskState.INFLIGHT or p.key != key:
                return False
            if not found:
                found = p.lease
            elif found != p.lease:
                return False
        lease = self.leases[found]
        if lease.revoked or self._spent(lease):
            return False
        t = tasks[task_id] = TaskEntry(key, max_retries)
        t.state, t.lease = TaskState.INFLIGHT, found
        lease.inflight[task_id] = None
        lease.calls += 1
        lease.stamp += 1
        self.log.append((FAST_CHAIN, task_id, key, max_retries, holds_resources, max_calls,
                         producers, found, lease.worker))
        return Send(task_id, found, lease.worker, 0)

    def result_fast(self, task_id: bytes) -> Send | bool:
        """`handle(Result(task_id))` (not retryable) for a task in flight on a lease that is
        neither revoked nor spent, when the outcome is its `Complete` and at most one `Send`
        from its queue onto that lease: returns that Send, True (complete, nothing more) or
        False (not such a case: nothing changed, call `handle`). The caller completes the
        task before sending."""
        t = self.tasks.get(task_id)
        if t is None or t.state is not TaskState.INFLIGHT:
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
            self.log.append((FAST_RESULT, task_id, lid, b"", "", 0))
            return True
        nid = ready.popleft()
        n = self.tasks[nid]
        n.state, n.lease = TaskState.INFLIGHT, lid
        mine.inflight[nid] = None
        mine.calls += 1
        mine.stamp += 1
        self.log.append((FAST_RESULT, task_id, lid, nid, mine.worker, n.attempt))
        return Send(nid, lid, mine.worker, n.attempt)
