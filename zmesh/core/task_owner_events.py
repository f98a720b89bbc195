"""The task-owner core's vocabulary (`core/task_owner.py`): the events it takes, the actions
it returns, and why a task fails without a result of its own. msgspec Structs, not
dataclasses: every task makes a few of them, and each dataclass costs ~0.5 ms to define at import."""

from __future__ import annotations

from collections.abc import Hashable
from enum import Enum

import msgspec

__all__ = [
    "Action", "ArgsReady", "ArmIdle", "Cancel", "CancelOnWorker", "Complete", "Event", "Fail",
    "IdleTimeout", "LeaseFailed", "LeaseGranted", "LeaseRevoked", "Reason", "Rebuild", "Rerun",
    "RequestLease", "ResolveArgs", "Result", "ReturnLease", "Send", "Submit", "WorkerExited",
]


class Reason(Enum):
    """Why a task failed without a result of its own."""

    CANCELLED = "cancelled"  # cancelled while it ran, and its worker then died
    CANCELLED_BEFORE_RUN = "cancelled before it ran"
    WORKER_DIED = "worker died"  # no retries left
    LEASE_FAILED = "lease failed"  # no worker can be leased for its shape


# -- events ---------------------------------------------------------------------------------
class Submit(msgspec.Struct):
    """A task was submitted. `waiting`: some arguments have no value yet; `producers` are
    the tasks that make those (the task may follow them onto their lease at once)."""

    task_id: bytes
    key: Hashable
    max_retries: int  # -1: retry forever
    holds_resources: bool = True
    max_calls: int = 0  # a worker of this shape retires after this many tasks (0: no limit)
    waiting: bool = False
    producers: tuple[bytes, ...] = ()


class ArgsReady(msgspec.Struct):
    """Every argument of a waiting task has its value."""

    task_id: bytes


class LeaseGranted(msgspec.Struct):
    request_id: int
    lease_id: bytes
    worker: str
    sender: str  # the node that granted it (an unwanted lease goes back there)
    remote: bool = False  # sender is another node: the lease is returned there, not to ours


class LeaseFailed(msgspec.Struct):
    """No lease can be granted for request `request_id`; `error` is a packed exception."""

    request_id: int
    error: bytes


class LeaseRevoked(msgspec.Struct):
    """The node wants the lease back (as soon as its tasks are done)."""

    lease_id: bytes


class WorkerExited(msgspec.Struct):
    """The leased worker died: its tasks in flight are retried or fail. `request_id`: the
    request the lease answered (-1: unknown)."""

    lease_id: bytes
    reason: str
    request_id: int = -1


class Result(msgspec.Struct):
    """The task's worker answered. `retryable`: the answer is an exception that the task's
    `retry_exceptions` covers (the shell decides; it holds the value)."""

    task_id: bytes
    retryable: bool = False


class IdleTimeout(msgspec.Struct):
    """Timer event: the idle timer `stamp` of a lease ran out. A lease idle since goes back;
    so it goes back between one and two timer lengths after its last task."""

    lease_id: bytes
    stamp: int


class Cancel(msgspec.Struct):
    task_id: bytes


class Rebuild(msgspec.Struct):
    """Run a finished task again, its stored return being lost (lineage); `attempt` is the
    attempt that made the lost value."""

    task_id: bytes
    key: Hashable
    max_retries: int
    attempt: int
    holds_resources: bool = True
    max_calls: int = 0


Event = (Submit | ArgsReady | LeaseGranted | LeaseFailed | LeaseRevoked | WorkerExited | Result
         | IdleTimeout | Cancel | Rebuild)


# -- actions --------------------------------------------------------------------------------
class Send(msgspec.Struct):
    """Send attempt `attempt` of the task to the lease's worker."""

    task_id: bytes
    lease_id: bytes
    worker: str
    attempt: int


class ResolveArgs(msgspec.Struct):
    """Wait for the task's argument values, then feed `ArgsReady`."""

    task_id: bytes


class RequestLease(msgspec.Struct):
    """Ask the node for a worker for tasks of shape `key`."""

    request_id: int
    key: Hashable


class ReturnLease(msgspec.Struct):
    """Give the lease back to `to` ("": our own node); `retire`: its worker is spent;
    `stop`: its worker may still run a task of ours that we gave up on (we were told it
    exited): the node stops it, as for a dead owner's lease, rather than reuse it."""

    lease_id: bytes
    retire: bool = False
    to: str = ""
    stop: bool = False


class ArmIdle(msgspec.Struct):
    """Start a timer that feeds `IdleTimeout(lease_id, stamp)`."""

    lease_id: bytes
    stamp: int


class Complete(msgspec.Struct):
    """The task's result is final: store its returns."""

    task_id: bytes


class Fail(msgspec.Struct):
    """The task ends without a result: its returns become this error."""

    task_id: bytes
    reason: Reason
    detail: str = ""  # the worker's death reason
    attempts: int = 0  # retries made before it failed
    error: bytes = b""  # a packed exception (LEASE_FAILED)


class CancelOnWorker(msgspec.Struct):
    """Ask the worker running the task to cancel it."""

    task_id: bytes
    worker: str


class Rerun(msgspec.Struct):
    """A rebuild was accepted: the task's returns wait for new values (attempt `attempt`)."""

    task_id: bytes
    attempt: int


Action = (Send | ResolveArgs | RequestLease | ReturnLease | ArmIdle | Complete | Fail
          | CancelOnWorker | Rerun)
