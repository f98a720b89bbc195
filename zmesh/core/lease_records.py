"""The records the node-lease core (`zmesh.core.node_leases`) keeps: leases, worker
processes and their roles, the queues between them, and the timing constants of its rules.
Plain data, apart from the core's logic, so the shells and tests can read them too."""

from __future__ import annotations

import enum
from collections import deque
from typing import Any

import msgspec

from zmesh.core.node_lease_events import ForwardLease
from zmesh.core.scheduling import Dispatch, Request

STORY_LEN = 2048
"""Events (with the actions they caused) kept for `story()`."""

STOP_GRACE_S = 2.0
"""A dead owner's busy worker gets SIGTERM, then SIGKILL after this."""

DEAD_OWNERS_KEPT = 4096
"""Owners (addresses, never reused) whose death a node remembers, to refuse their requests
still in flight when they died."""

FORWARD_SWEEP_S = 2.0
"""How often an origin node looks over the leases it forwarded: one not known granted for a
whole period is sent again (the ForwardLease or the word of its grant may have been lost)."""

SWEEP_KEY = ("forwarded", b"")


class WorkerRole(enum.Enum):
    IDLE = "idle"
    LEASED = "leased"
    HANDED = "handed"  # given to an actor (the actor shell owns it now)
    STOPPING = "stopping"  # its lease's owner died: SIGTERM sent, SIGKILL follows
    RETIRED = "retired"  # ran its max_calls, told to exit
    DEAD = "dead"


class Lease(msgspec.Struct, eq=False, dict=True):
    """One lease on this node: requested, waiting, granted, or forwarded elsewhere."""

    lease_id: bytes
    owner: str
    request_id: int
    name: str
    request: Request
    payload: Any = None  # the owner's RequestLease, passed on as it is when forwarding
    origin: str = ""  # the node that forwarded it here (it keeps a record)
    remote: str = ""  # the node we forwarded it to (we are its origin)
    remote_granted: bool = False
    forwarded: ForwardLease | None = None  # how we forwarded it (sent again if nothing came)
    quiet: bool = False  # a forward sweep found it not granted yet (the next one resends)
    worker: bytes | None = None
    gpu_ids: tuple[int, ...] = ()  # granted with these (a grant sent again names them)
    lent: bool = False  # its worker is blocked in get/wait and lent its CPU out
    evicted: bool = False  # its placement group was removed: the scheduler freed it already


class WorkerRecord(msgspec.Struct, eq=False, dict=True):
    """A worker process this node started, and what it does now."""

    worker: bytes
    role: WorkerRole = WorkerRole.IDLE
    lease: bytes | None = None
    used: bool = False  # ever leased or handed out: it may own objects or tasks since


class Queues(msgspec.Struct, dict=True):
    """Idle workers, granted leases waiting for one, actors waiting for one."""

    idle: list[bytes] = msgspec.field(default_factory=list)  # LIFO: the warmest worker first
    leases: deque[tuple[bytes, Dispatch]] = msgspec.field(default_factory=deque)  # granted, no worker
    wants: deque[int] = msgspec.field(default_factory=deque)  # actor tokens waiting for a worker




def mentions(item: Any, key: bytes | str) -> bool:
    """Whether a logged event or action (a Struct) names `key` in one of its fields."""
    if not isinstance(item, msgspec.Struct):
        return False
    for name in item.__struct_fields__:
        value = getattr(item, name)
        if value == key or (isinstance(value, tuple) and key in value):
            return True
    return False
