"""Task submission by the owner: resolve ref arguments, lease workers, pipeline tasks to them.

Tasks of one shape (resources + strategy) share a queue. The owner asks its node for worker
leases, sends tasks straight to leased workers (a few in flight each), retries tasks whose
worker died, and gives leases back once idle or when the node asks.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from zmesh.errors import TaskCancelledError, WorkerCrashedError
from zmesh.protocol.messages import runtime as m
from zmesh.runtime import values
from zmesh.runtime.ids import IdGen
from zmesh.runtime.loop import EventLoop

if TYPE_CHECKING:
    from zmesh.object_ref import ObjectRef
    from zmesh.runtime.owner.client import CoreClient

PIPELINE_DEPTH = 4
PENDING = m.Value()  # an argument the worker resolves itself (it made it, or asks the owner)
IDLE_LEASE_S = 0.5
MAX_LEASE_REQUESTS = 16


@dataclass(eq=False)
class Task:
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
    labels: dict[str, str] = field(default_factory=dict)
    ref_values: list[m.Value | None] = field(default_factory=list)
    unresolved: int = 0
    lease: Lease | None = None
    cancelled: bool = False
    done: bool = False
    backpressure: int = 0  # streaming generators: items the worker may run ahead
    max_calls: int = 0  # a worker exits after this many calls (0: no limit)
    parent: bytes = b""  # the task that submitted it (cancel(recursive=True) follows this)

    def return_ids(self) -> list[bytes]:
        return [IdGen.object_id(self.task_id, i) for i in range(max(self.num_returns, 1))]


@dataclass(eq=False)
class Lease:
    lease_id: bytes
    worker: str
    queue: KeyQueue
    inflight: dict[bytes, Task] = field(default_factory=dict)
    idle_timer: int = 0
    revoked: bool = False
    gpu_env: dict[str, str] = field(default_factory=dict)  # CUDA_VISIBLE_DEVICES of its GPUs
    calls: int = 0  # tasks sent to it

    def spent(self) -> bool:
        """Its worker ran the max_calls it may: it takes no more tasks and retires."""
        limit = self.queue.max_calls
        return bool(limit) and self.calls >= limit


@dataclass(eq=False)
class KeyQueue:
    resources: dict[str, float]
    strategy: bytes
    name: str
    labels: dict[str, str]
    max_calls: int = 0
    ready: deque[Task] = field(default_factory=deque)
    leases: list[Lease] = field(default_factory=list)
    requesting: int = 0


class TaskSubmitter:
    """Owner-side task state; every method but `submit` runs on the loop thread."""

    def __init__(self, client: CoreClient) -> None:
        self.client = client
        self.queues: dict[tuple[Any, ...], KeyQueue] = {}
        self.tasks: dict[bytes, Task] = {}
        self.leases: dict[bytes, Lease] = {}
        self._lease_requests: dict[int, KeyQueue] = {}
        self._next_request = 0
        self._sent_fns: set[tuple[str, bytes]] = set()
        self.pending_reasons: dict[str, str] = {}

    def register(self, loop: EventLoop) -> None:
        loop.on(m.LeaseGranted, self._on_lease_granted)
        loop.on(m.LeaseFailed, self._on_lease_failed)
        loop.on(m.RevokeLease, self._on_revoke)
        loop.on(m.WorkerExited, self._on_worker_exited)
        loop.on(m.TaskResult, self._on_result)

    # -- submission (user thread) ----------------------------------------------------------
    def submit(self, task: Task) -> None:
        client = self.client
        task.parent = client.current_task_id
        ids = [r.id for r in task.top_refs] + task.nested_ids
        if ids:
            client.objects.add_submitted(ids)
        client.loop.call_soon(self._accept, task)

    # -- loop thread -----------------------------------------------------------------------
    def _accept(self, task: Task) -> None:
        self.tasks[task.task_id] = task
        refs = task.top_refs
        if not refs:
            self._enqueue(task)
            return
        task.ref_values = [None] * len(refs)
        lease = self._chain_lease(task)
        if lease is not None:
            value_of = self.client.objects.value_of
            task.ref_values = [value_of(r.id) for r in refs]
            self._send(lease, task)
            return
        task.unresolved = len(refs)
        self.client._request_borrowed(refs)
        for i, ref in enumerate(refs):
            if not self.client.objects.when_ready(ref.id, self._resolver(task, i)):
                self._resolver(task, i)(values.encode_error(
                    ValueError(f"argument {ref!r} is not known to this process")))

    def _chain_lease(self, task: Task) -> Lease | None:
        """The lease running the tasks that make this task's missing arguments, if they all
        run on one lease with room: the task can follow them there at once, and the worker
        uses the values it made itself instead of a round trip through the owner."""
        lease: Lease | None = None
        value_of = self.client.objects.value_of
        for ref in task.top_refs:
            if value_of(ref.id) is not None:
                continue
            producer = self.tasks.get(ref.id[:-4])
            if producer is None or producer.lease is None or producer.key != task.key:
                return None
            if lease is None:
                lease = producer.lease
            elif lease is not producer.lease:
                return None
        # no depth limit here: a chain runs one task after another wherever it is
        if lease is None or lease.revoked or lease.spent():
            return None
        return lease

    def _resolver(self, task: Task, index: int) -> Any:
        def resolved(value: m.Value) -> None:
            task.ref_values[index] = value
            task.unresolved -= 1
            if task.unresolved == 0 and not task.cancelled:
                self.client.loop.call_soon(self._enqueue, task)
        return resolved

    def _enqueue(self, task: Task) -> None:
        q = self.queues.get(task.key)
        if q is None:
            q = self.queues[task.key] = KeyQueue(task.resources, task.strategy, task.name,
                                                 task.labels, task.max_calls)
        q.ready.append(task)
        self._pump(q)

    def _pump(self, q: KeyQueue) -> None:
        ready = q.ready
        # Work that holds no resources can always get another worker: one task per worker,
        # so that zero-CPU tasks run side by side (as in Ray) instead of queueing on one.
        depth = PIPELINE_DEPTH if q.resources else 1
        limit = q.max_calls
        for lease in q.leases:
            while ready and len(lease.inflight) < depth and not lease.revoked \
                    and (not limit or lease.calls < limit):
                self._send(lease, ready.popleft())
            if not lease.inflight:
                self._arm_idle(lease)
        want = min(len(ready), MAX_LEASE_REQUESTS) - q.requesting
        for _ in range(want):
            self._next_request += 1
            rid = self._next_request
            self._lease_requests[rid] = q
            q.requesting += 1
            self.client.loop.send(self.client.node_address, m.RequestLease(
                request_id=rid, owner=self.client.address, resources=q.resources,
                name=q.name, strategy=q.strategy, labels=q.labels))

    def _send(self, lease: Lease, task: Task) -> None:
        if task.cancelled:
            return
        lease.idle_timer += 1
        lease.calls += 1
        task.lease = lease
        lease.inflight[task.task_id] = task
        key = (lease.worker, task.fn_id)
        blob = b""
        if key not in self._sent_fns:
            self._sent_fns.add(key)
            blob = task.fn_blob
        refs: list[m.Value] = []
        ref_ids: list[bytes] = []
        if task.ref_values:
            refs = [PENDING if v is None else v for v in task.ref_values]
            if any(v is None for v in task.ref_values):
                ref_ids = [r.id for r in task.top_refs]
        self.client.loop.send(lease.worker, m.ExecuteTask(
            task_id=task.task_id, owner=self.client.address, fn_id=task.fn_id, name=task.name,
            args=m.Args(data=task.data, refs=refs), num_returns=task.num_returns,
            fn_blob=blob, env_vars={**task.env_vars, **lease.gpu_env} if lease.gpu_env
            else task.env_vars, attempt=task.attempt, ref_ids=ref_ids,
            namespace=self.client.namespace, resources=task.resources,
            backpressure=task.backpressure, strategy=task.strategy))

    def _arm_idle(self, lease: Lease) -> None:
        lease.idle_timer += 1
        stamp = lease.idle_timer
        self.client.loop.call_later(IDLE_LEASE_S, lambda: self._idle_check(lease, stamp))

    def _idle_check(self, lease: Lease, stamp: int) -> None:
        if lease.idle_timer == stamp and not lease.inflight and not lease.queue.ready:
            self._return_lease(lease)

    def _return_lease(self, lease: Lease) -> None:
        if self.leases.pop(lease.lease_id, None) is None:
            return
        lease.queue.leases.remove(lease)
        self.client.loop.send(self.client.node_address, m.ReturnLease(
            lease_id=lease.lease_id, retire=lease.spent()))

    def _on_lease_granted(self, sender: str, msg: m.LeaseGranted, bufs: list[Any]) -> None:
        q = self._lease_requests.pop(msg.request_id, None)
        if q is None:
            self.client.loop.send(sender, m.ReturnLease(lease_id=msg.lease_id))
            return
        q.requesting -= 1
        self.pending_reasons.pop(q.name, None)
        lease = Lease(msg.lease_id, msg.worker_address, q)
        if msg.gpu_ids or q.resources.get("GPU"):
            lease.gpu_env = {"CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in msg.gpu_ids)}
        self.leases[msg.lease_id] = lease
        q.leases.append(lease)
        if not q.ready:
            self._return_lease(lease)
            return
        self._pump(q)

    def _on_lease_failed(self, sender: str, msg: m.LeaseFailed, bufs: list[Any]) -> None:
        q = self._lease_requests.pop(msg.request_id, None)
        if q is None:
            return
        q.requesting -= 1
        err = m.Value(data=msg.error, is_error=True)
        while q.ready:
            self._finish(q.ready.popleft(), [err] * 1, failed=True)

    def _on_revoke(self, sender: str, msg: m.RevokeLease, bufs: list[Any]) -> None:
        lease = self.leases.get(msg.lease_id)
        if lease is None:
            return
        lease.revoked = True
        if not lease.inflight:
            self._return_lease(lease)

    def _on_worker_exited(self, sender: str, msg: m.WorkerExited, bufs: list[Any]) -> None:
        lease = self.leases.pop(msg.lease_id, None)
        if lease is None:
            return
        lease.queue.leases.remove(lease)
        retry: list[Task] = []
        for task in list(lease.inflight.values()):  # in the order they were sent
            task.lease = None
            if task.cancelled:
                self._finish(task, [values.encode_error(TaskCancelledError(
                    f"task {task.name} was cancelled"))], failed=True)
            elif task.attempt < task.max_retries:
                task.attempt += 1
                retry.append(task)
            else:
                self._finish(task, [values.encode_error(WorkerCrashedError(
                    f"the worker running task {task.name} died: {msg.reason}"
                    + (f" (after {task.attempt} retries)" if task.attempt else "")))], failed=True)
        # Ahead of the queue, keeping their order: a chain's later tasks wait for earlier ones.
        lease.queue.ready.extendleft(reversed(retry))
        self._pump(lease.queue)

    def _on_result(self, sender: str, msg: m.TaskResult, bufs: list[Any]) -> None:
        task = self.tasks.get(msg.task_id)
        if task is None:
            self.client.actors.on_result(sender, msg)
            return
        lease = task.lease
        if lease is not None:
            lease.inflight.pop(task.task_id, None)
            task.lease = None
        if msg.borrowed:
            self.client.objects.add_borrower(msg.borrowed, sender)
        if self._should_retry(task, msg):
            task.attempt += 1
            if lease is not None:
                lease.queue.ready.append(task)
        else:
            self._finish(task, msg.returns, failed=False)
            if msg.contained:
                self.client.hold_returned(sender, task.return_ids(), msg.contained)
        if lease is not None:
            if (lease.revoked or lease.spent()) and not lease.inflight:
                self._return_lease(lease)
            self._pump(lease.queue)

    def _should_retry(self, task: Task, msg: m.TaskResult) -> bool:
        retry = task.retry_exceptions
        if not retry or task.attempt >= task.max_retries or task.cancelled:
            return False
        first = msg.returns[0] if msg.returns else None
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

    def _finish(self, task: Task, returns: list[m.Value], *, failed: bool) -> None:
        if task.done:
            return
        task.done = True
        self.tasks.pop(task.task_id, None)
        objects = self.client.objects
        rebuildable = (not failed and all(v is not None and v.loc is None for v in task.ref_values)
                       and not _pinned_to_a_node(task.strategy))
        for i, oid in enumerate(task.return_ids()):
            value = returns[i] if i < len(returns) else returns[0]
            if rebuildable and value.loc is not None:
                entry = objects.entries.get(oid)
                if entry is not None:
                    entry.lineage = task  # its only copies live in stores: keep the recipe
            if objects.set_value(oid, value) is None and value.loc is not None:
                self.client.loop.send(self.client.node_address, m.FreeObjects(
                    object_ids=[oid], node=value.loc.node))
        ids = [r.id for r in task.top_refs] + task.nested_ids
        task.top_refs = []
        task.nested_ids = []
        if ids:
            objects.remove_submitted(ids)

    def rebuild(self, object_id: bytes) -> None:
        """Run again the task that made `object_id`, whose stored copy was lost (lineage).

        Its returns wait for the new values; if it has no retries left they keep the error.
        """
        entry = self.client.objects.entries.get(object_id)
        task = None if entry is None else entry.lineage
        if task is None or not task.done:
            return  # gone, not rebuildable, or already being rebuilt
        if task.attempt >= task.max_retries:
            return
        task.attempt += 1
        task.done = False
        with self.client.objects.lock:
            for oid in task.return_ids():
                e = self.client.objects.entries.get(oid)
                if e is not None:
                    e.value = None
                    e.lineage = None
        self.tasks[task.task_id] = task
        task.lease = None
        self._enqueue(task)

    # -- cancellation ----------------------------------------------------------------------
    def cancel(self, task_id: bytes, force: bool, recursive: bool = True) -> None:
        task = self.tasks.get(task_id)
        if task is None or task.done:
            return
        task.cancelled = True
        if task.lease is None:
            q = self.queues.get(task.key)
            if q is not None and task in q.ready:
                q.ready.remove(task)
            self._finish(task, [values.encode_error(TaskCancelledError(
                f"task {task.name} was cancelled before it ran"))], failed=True)
            return
        self.client.loop.send(task.lease.worker, m.CancelTask(task_id=task_id, force=force,
                                                              recursive=recursive))

    def cancel_children(self, parent: bytes, force: bool) -> None:
        """Cancel the unfinished tasks that `parent` submitted, and theirs (loop thread)."""
        for task in [t for t in self.tasks.values() if t.parent == parent and not t.done]:
            self.cancel(task.task_id, force, recursive=True)

    def pending_reason(self, task_id: bytes) -> str:
        task = self.tasks.get(task_id)
        if task is None or task.lease is not None:
            return ""
        return self.pending_reasons.get(task.name, "")


def _pinned_to_a_node(strategy: bytes) -> bool:
    """Hard node affinity: such a task cannot be run again elsewhere once its node is gone."""
    if not strategy:
        return False
    from zmesh.core.scheduling import NodeAffinity
    from zmesh.runtime.strategies import decode_strategy

    decoded = decode_strategy(strategy)
    return isinstance(decoded, NodeAffinity) and not decoded.soft
