"""One normal task as its owner keeps it (`Task`: code, arguments, options, progress), and
what a result or a failure of the core means for it (`retryable`, `failure`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from zmesh.core.exhaustive import assert_never
from zmesh.core.task_owner_events import Fail, Reason
from zmesh.errors import TaskCancelledError, WorkerCrashedError
from zmesh.protocol.messages import runtime as m
from zmesh.runtime import values
from zmesh.runtime.ids import IdGen

if TYPE_CHECKING:
    from zmesh.object_ref import ObjectRef

_FIRST_RETURN = IdGen.object_id(b"", 0)  # the suffix of a task's first return's id
PENDING = m.Value()  # an argument the worker resolves itself (it made it, or asks the owner)


class Task(msgspec.Struct, eq=False, dict=True):
    """One task as its owner tracks it, from submission to its last result."""

    task_id: bytes
    fn_id: bytes
    fn_blob: bytes
    name: str
    data: bytes
    top_refs: list[ObjectRef]
    nested_ids: list[bytes]
    num_returns: int
    key: tuple[Any, ...]
    resources: dict[str, float]
    strategy: bytes
    max_retries: int
    retry_exceptions: Any
    env_vars: dict[str, str]
    attempt: int = 0
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    ref_values: list[m.Value | None] = msgspec.field(default_factory=list)
    unresolved: int = 0
    done: bool = False
    force_cancel: bool = False  # how a cancel asks its worker
    recursive_cancel: bool = True
    backpressure: int = 0  # streaming generators: items the worker may run ahead
    max_calls: int = 0  # a worker exits after this many calls (0: no limit)
    parent: bytes = b""  # the task that submitted it (cancel(recursive=True) follows this)

    def message(self, blob: bytes, gpu_env: dict[str, str] | None, owner: str,
                namespace: str) -> m.ExecuteTask:
        """The message that runs this attempt of it on a worker (`blob`: its code, or b""
        when the worker has it; `gpu_env`: the lease's CUDA_VISIBLE_DEVICES)."""
        refs: list[m.Value] = []
        ref_ids: list[bytes] = []
        if self.ref_values:
            refs = [PENDING if v is None else v for v in self.ref_values]
            if any(v is None for v in self.ref_values):
                ref_ids = [r.id for r in self.top_refs]
        return m.ExecuteTask(
            task_id=self.task_id, owner=owner, fn_id=self.fn_id, name=self.name,
            args=m.Args(data=self.data, refs=refs), num_returns=self.num_returns,
            fn_blob=blob, env_vars={**self.env_vars, **gpu_env} if gpu_env
            else self.env_vars, attempt=self.attempt, ref_ids=ref_ids,
            namespace=namespace, resources=self.resources,
            backpressure=self.backpressure, strategy=self.strategy)

    def return_ids(self) -> list[bytes]:
        if self.num_returns <= 1:  # the common case (every task's result passes here)
            return [self.task_id + _FIRST_RETURN]
        return [IdGen.object_id(self.task_id, i) for i in range(self.num_returns)]


def retryable(task: Task, msg: m.TaskResult) -> bool:
    """The result is an exception that the task's `retry_exceptions` covers."""
    return covered(task.retry_exceptions, msg.returns)


def covered(retry: Any, returns: list[m.Value]) -> bool:
    """The first of `returns` is an exception that `retry` (a task's or an actor call's
    `retry_exceptions`: a bool or exception classes) says to retry."""
    if not retry:
        return False
    first = returns[0] if returns else None
    if first is None or not first.is_error:
        return False
    if retry is True:
        return True
    try:
        err = values.decode(first, None)
    except Exception:
        return False
    cause = getattr(err, "cause", err)
    return isinstance(cause, tuple(retry))


def failure(task: Task, fail: Fail) -> m.Value:
    """The error value a failed task's returns take."""
    match fail.reason:
        case Reason.LEASE_FAILED:
            return m.Value(data=fail.error, is_error=True)
        case Reason.CANCELLED:
            return values.encode_error(TaskCancelledError(f"task {task.name} was cancelled"))
        case Reason.CANCELLED_BEFORE_RUN:
            return values.encode_error(TaskCancelledError(
                f"task {task.name} was cancelled before it ran"))
        case Reason.WORKER_DIED:
            return values.encode_error(WorkerCrashedError(
                f"the worker running task {task.name} died: {fail.detail}"
                + (f" (after {fail.attempts} retries)" if fail.attempts else "")))
        case _:
            assert_never(fail.reason)


def pinned_to_a_node(strategy: bytes) -> bool:
    """Hard node affinity: such a task cannot be run again elsewhere once its node is gone."""
    if not strategy:
        return False
    from zmesh.core.scheduling import NodeAffinity
    from zmesh.runtime.strategies import decode_strategy

    decoded = decode_strategy(strategy)
    return isinstance(decoded, NodeAffinity) and not decoded.soft
