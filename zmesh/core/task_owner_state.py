"""The task-owner core's tables (`core/task_owner.py`): its tasks, its queues (one per task
shape) and its leases, and the bounded log of what it did. Shared by the rules
(`task_owner.py`), their fast paths (`task_owner_fast.py`) and the checks
(`task_owner_checks.py`)."""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from enum import Enum
from typing import Any

import msgspec

PIPELINE_DEPTH = 4
MAX_LEASE_REQUESTS = 16


EXITED_KEPT = 1024
"""Lease ids told exited before granted, remembered (see TaskOwnerState.exited)."""


class TaskState(Enum):
    WAITING = "waiting"  # for its arguments
    QUEUED = "queued"
    INFLIGHT = "inflight"


class TaskEntry(msgspec.Struct):
    key: Hashable
    max_retries: int
    attempt: int = 0
    state: TaskState = TaskState.QUEUED
    lease: bytes = b""
    cancelled: bool = False

    def may_retry(self) -> bool:
        return self.max_retries < 0 or self.attempt < self.max_retries


class ShapeQueue(msgspec.Struct):
    depth: int
    max_calls: int
    ready: deque[bytes] = msgspec.field(default_factory=deque)
    leases: list[bytes] = msgspec.field(default_factory=list)
    requesting: int = 0


class LeaseEntry(msgspec.Struct):
    key: Hashable
    worker: str
    inflight: dict[bytes, None] = msgspec.field(default_factory=dict)  # in the order sent
    calls: int = 0
    stamp: int = 0  # bumped by every task sent: an idle timer armed before is stale
    armed: bool = False  # an idle timer is pending
    revoked: bool = False
    granter: str = ""  # the node that granted it, when not our own: returned there


# a fast path's compact log entry starts with one of these (`task_owner_checks.expand`)
FAST_SUBMIT = "submit"
FAST_RESULT = "result"
FAST_CHAIN = "chain"


class TaskOwnerState:
    """The tables one `TaskOwner` keeps; no rules."""

    def __init__(self, log_size: int = 10_000) -> None:
        self.tasks: dict[bytes, TaskEntry] = {}
        self.queues: dict[Hashable, ShapeQueue] = {}
        self.leases: dict[bytes, LeaseEntry] = {}
        self.requests: dict[int, Hashable] = {}
        self._next_request = 0
        # Leases we were told had lost their worker before their grant reached us (the latest
        # EXITED_KEPT): a grant that comes later is given back, never used.
        self.exited: dict[bytes, None] = {}
        # (event, actions), or a fast path's compact entry (`FAST_SUBMIT`/`FAST_RESULT`, ...)
        self.log: deque[tuple[Any, ...]] = deque(maxlen=log_size)

    def note_exited(self, lease_id: bytes) -> None:
        self.exited[lease_id] = None
        if len(self.exited) > EXITED_KEPT:
            del self.exited[next(iter(self.exited))]

    def _spent(self, lease: LeaseEntry) -> bool:
        limit = self.queues[lease.key].max_calls
        return bool(limit) and lease.calls >= limit
