"""Checks and history of the task-owner core: its invariants (`validate`) and the story of
one task or lease out of its log (`story`), for tests and for the errors they print."""

from __future__ import annotations

from typing import Any

from zmesh.core.task_owner_events import Action, Complete, Event, Result, Send, Submit
from zmesh.core.task_owner_state import (
    FAST_CHAIN,
    FAST_RESULT,
    FAST_SUBMIT,
    MAX_LEASE_REQUESTS,
    TaskOwnerState,
    TaskState,
)


def validate(owner: TaskOwnerState) -> None:
    """Check the invariants; AssertionError naming the task or lease and its story."""
    placed: dict[bytes, str] = {}

    def place(tid: bytes, where: str) -> None:
        assert tid not in placed, \
            f"task {tid.hex()} is {placed[tid]} and {where}\n{story(owner, tid)}"
        placed[tid] = where

    for key, q in owner.queues.items():
        for tid in q.ready:
            place(tid, f"queued on {key!r}")
            t = owner.tasks.get(tid)
            assert t is not None and t.state is TaskState.QUEUED and t.key == key, \
                f"queued task {tid.hex()} is not a queued task of its shape\n{story(owner, tid)}"
        asked = sum(1 for k in owner.requests.values() if k == key)
        assert q.requesting == asked, f"queue {key!r} counts {q.requesting} requests, {asked}"
        assert q.requesting <= MAX_LEASE_REQUESTS, f"queue {key!r} asks too much"
        if q.ready:
            assert q.requesting >= min(len(q.ready), MAX_LEASE_REQUESTS), \
                f"queue {key!r} has tasks waiting but asks for too few leases"
        for lid in q.leases:
            lease = owner.leases.get(lid)
            assert lease is not None and lease.key == key, f"lease {lid.hex()} misfiled"
            if q.ready:
                full = len(lease.inflight) >= q.depth or lease.revoked or \
                    owner._spent(lease)
                assert full, f"lease {lid.hex()} has room while {key!r} waits\n" \
                    f"{story(owner, lid)}"
    for lid, lease in owner.leases.items():
        assert lid in owner.queues[lease.key].leases, f"lease {lid.hex()} not in its queue"
        for tid in lease.inflight:
            place(tid, f"in flight on lease {lid.hex()}")
            t = owner.tasks.get(tid)
            assert t is not None and t.state is TaskState.INFLIGHT and t.lease == lid, \
                f"task {tid.hex()} in flight on a lease it does not know\n{story(owner, tid)}"
    for tid, t in owner.tasks.items():
        assert t.max_retries < 0 or t.attempt <= t.max_retries, \
            f"task {tid.hex()} ran more attempts than allowed\n{story(owner, tid)}"
        if t.state is TaskState.WAITING:
            place(tid, "waiting for its arguments")
        assert tid in placed, f"task {tid.hex()} is nowhere\n{story(owner, tid)}"
        assert not t.cancelled or t.state is TaskState.INFLIGHT, \
            f"cancelled task {tid.hex()} still waits to run\n{story(owner, tid)}"


def story(owner: TaskOwnerState, key: bytes) -> str:
    """Logged events and actions about a task or a lease, oldest first."""
    def about(item: Event | Action) -> bool:
        return key in (getattr(item, "task_id", None), getattr(item, "lease_id", None)) \
            or key in getattr(item, "producers", ())
    lines = [f"{e!r} -> {list(acts)!r}" for e, acts in map(expand, owner.log)
             if about(e) or any(about(a) for a in acts)]
    return "\n".join(lines) or f"(no events about {key.hex()})"


def expand(entry: tuple[Any, ...]) -> tuple[Event, tuple[Action, ...]]:
    """A log entry as (event, actions): a fast path's compact entry rebuilt as handle's."""
    if entry[0] is FAST_SUBMIT:
        _, tid, key, retries, holds, calls, lid, worker = entry
        return Submit(tid, key, retries, holds, calls), (Send(tid, lid, worker, 0),) if lid else ()
    if entry[0] is FAST_CHAIN:
        _, tid, key, retries, holds, calls, producers, lid, worker = entry
        return Submit(tid, key, retries, holds, calls, True, producers), \
            (Send(tid, lid, worker, 0),)
    if entry[0] is FAST_RESULT:
        _, tid, lid, nid, worker, attempt = entry
        done = Complete(tid)
        return Result(tid), (done, Send(nid, lid, worker, attempt)) if nid else (done,)
    return entry[0], entry[1]

