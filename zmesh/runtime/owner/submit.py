"""Task submission by the owner: the shell around the task-owner core (`core/task_owner.py`).

The core decides leases, pipelining, retries and cancellation; this shell keeps what it does
not (each task's code, arguments and results, in `task_record.Task`), resolves ref
arguments, and turns the core's actions into messages and timers.
"""

from __future__ import annotations

import functools
import threading
from collections import deque
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any, TypeVar

from zmesh.core.exhaustive import assert_never
from zmesh.core.task_owner import (
    Action,
    ArgsReady,
    ArmIdle,
    Cancel,
    CancelOnWorker,
    Complete,
    Fail,
    IdleTimeout,
    LeaseFailed,
    LeaseGranted,
    LeaseRevoked,
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
from zmesh.protocol import codec
from zmesh.protocol.messages import runtime as m
from zmesh.runtime import values
from zmesh.runtime.loop import EventLoop
from zmesh.runtime.owner.resend import SWEEP_S, Resends
from zmesh.runtime.owner.task_record import (
    Task,
    failure,
    pinned_to_a_node,
    retryable,
)

if TYPE_CHECKING:
    from zmesh.runtime.owner.client import CoreClient

IDLE_LEASE_S = 0.5
LOOP_CONNECTION = 0  # the loop's own connections (else: a thread sender's conn_id)

F = TypeVar("F", bound=Callable[..., Any])


def _locked(method: F) -> F:
    """Run a loop-thread handler holding the submitter's lock (user threads may submit
    straight to a leased worker, which changes the core too); the messages to workers it
    decided go out once the lock is released (`_flush`)."""
    @functools.wraps(method)
    def run(self: TaskSubmitter, *args: Any, **kwargs: Any) -> Any:
        try:
            with self.lock:
                # the thread serving the loop now (a worker's may change: worker/relay.py);
                # a submission from inside a handler never takes the direct path
                self._loop_ident = threading.get_ident()
                return method(self, *args, **kwargs)
        finally:
            if self._outbox:
                self._flush()
    return run  # type: ignore[return-value]


class TaskSubmitter:
    """The shell around the task-owner core: task payloads, messages and timers.

    Every method but `submit` runs on the loop thread. The core decides; this class turns
    its actions into messages (`_do`, one exhaustive `match`) and messages into its events.
    The two events every task makes (its submission with its arguments there, its result
    that is not retried) go through the core's fast paths first, which apply the same rules
    without event or action objects when the outcome is at most one Send.

    A user thread submitting a task with no ref arguments, when nothing it submitted before
    still waits for the loop and the fast path has a leased worker with room, sends it
    there itself over its own connection (no hop through the loop). `lock` serializes the
    core between it and the loop. Connections are not ordered with each other, and a
    worker runs its tasks in the order they arrive (a chained task must come after the one
    that makes its argument), so a worker gets tasks over one connection at a time: a user
    thread sends directly only to a worker with nothing in flight but what it sent itself,
    and the loop holds back what it would send to a worker with directly sent tasks in
    flight until their results came. Code goes with a task until the worker has answered one
task of that function (`_fn_known`).
    """

    def __init__(self, client: CoreClient) -> None:
        self.client = client
        self.core = TaskOwner()
        self.tasks: dict[bytes, Task] = {}  # the payloads of the tasks the core tracks
        self._shapes: dict[Hashable, Task] = {}  # the first task of each shape (lease asks)
        self._gpu_env: dict[bytes, dict[str, str]] = {}  # lease -> CUDA_VISIBLE_DEVICES
        self._fn_known: set[tuple[str, bytes]] = set()  # (worker, fn) it answered: has the code
        self.pending_reasons: dict[str, str] = {}
        self._rebuilding: Task | None = None
        self.lock = threading.RLock()  # the core and the tables above (see the class doc)
        self._posted: deque[bytes] = deque()  # tasks handed to the loop, not yet accepted
        self._direct: dict[bytes, bytes] = {}  # task a user thread sent itself -> its lease
        # lease -> (connection, tasks sent over it in flight); the loop's sends held meanwhile
        self._direct_leases: dict[bytes, tuple[int, int]] = {}
        self._held: dict[bytes, list[Send]] = {}
        self._loop_ident = 0  # the loop thread's id, once it accepted a task
        self.resends = Resends()  # tasks out at workers, sent again if no result comes
        self._sweep_armed = False
        # ExecuteTask/CancelTask decided with the lock held (loop thread), sent in order once
        # it is released: a send lets go of the GIL, and a user thread that took it then found
        # the lock held and posted its task to the loop instead of submitting it itself
        self._outbox: list[tuple[str, m.ExecuteTask | m.CancelTask]] = []

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
        if not task.top_refs and not self._posted and self._submit_direct(task):
            return
        self._posted.append(task.task_id)
        client.loop.call_soon(self._accept, task)

    def _submit_direct(self, task: Task) -> bool:
        """Send the task to a leased worker from this (user) thread, when the core's fast
        path allows it and its lock is free; False: nothing was done, post it to the loop."""
        client = self.client
        me = threading.get_ident()
        if me == self._loop_ident or client.closed:
            return False
        sender: Any = getattr(client._local, "sender", None)
        if sender is None:  # False: this transport has no thread senders
            sender = client._local.sender = client.endpoint.thread_sender() or False
        if sender is False or not self.lock.acquire(False):
            return False
        try:
            if self._posted:  # an earlier task still waits for the loop: keep the order
                return False
            sent = self.core.submit_fast(task.task_id, task.key, task.max_retries,
                                         bool(task.resources), task.max_calls)
            if sent is False:
                return False
            self.tasks[task.task_id] = task
            if sent is True:  # queued: the loop sends it when its worker has room
                return True
            conn = sender.conn_id  # never reused by another thread's connection
            lid = sent.lease_id
            before = len(self.core.leases[lid].inflight) - 1
            mine = self._direct_leases.get(lid, (conn, 0))
            if mine[0] != conn or mine[1] != before or lid in self._held:
                # Others are in flight there: the loop sends it, before anything it decides
                # for that worker later (a call_soon alone could be overtaken by a send the
                # loop makes while handling a result first: a chained task then waits
                # forever for an argument queued behind it on the same worker).
                self._hold(sent)
                return True
            try:
                sender.send(sent.worker, [codec.encode(self._execute(sent, conn))])
            except Exception:  # not sent (a full queue, no fds left): the loop sends it
                self._hold(sent)
                return True
            except BaseException:  # an interrupt: the loop sends it (tasks are at least
                self._hold(sent)  # once), then raise
                raise
            self._direct[task.task_id] = lid
            self._direct_leases[lid] = (conn, before + 1)
            self._note_sent(sent)
            return True
        finally:
            self.lock.release()

    # -- loop thread: events in ------------------------------------------------------------
    @_locked
    def _accept(self, task: Task) -> None:
        self._posted.popleft()
        self.tasks[task.task_id] = task
        if task.key not in self._shapes:
            self._shapes[task.key] = task
        refs = task.top_refs
        producers: tuple[bytes, ...] = ()
        if refs:
            value_of = self.client.objects.value_of
            task.ref_values = [value_of(r.id) for r in refs]
            producers = tuple(r.id[:-4] for r, v in zip(refs, task.ref_values) if v is None)
        if not producers:
            sent = self.core.submit_fast(task.task_id, task.key, task.max_retries,
                                         bool(task.resources), task.max_calls)
            if sent is True:
                return
            if sent is not False:
                self._send(sent)
                return
        else:  # a chain: it follows the tasks that make its arguments onto their worker
            sent = self.core.submit_chained(task.task_id, task.key, task.max_retries,
                                            bool(task.resources), task.max_calls, producers)
            if isinstance(sent, Send):
                self._send(sent)
                return
        self._do(self.core.handle(Submit(
            task.task_id, task.key, task.max_retries, bool(task.resources), task.max_calls,
            bool(producers), producers)))

    def _resolve(self, task: Task) -> None:
        refs = task.top_refs
        task.unresolved = len(refs)
        self.client._request_borrowed(refs)
        for i, ref in enumerate(refs):
            if not self.client.objects.when_ready(ref.id, self._resolver(task, i)):
                self._resolver(task, i)(values.encode_error(
                    ValueError(f"argument {ref!r} is not known to this process")))

    def _resolver(self, task: Task, index: int) -> Any:
        def resolved(value: m.Value) -> None:
            task.ref_values[index] = value
            task.unresolved -= 1
            if task.unresolved == 0:
                self.client.loop.call_soon(self._args_ready, task.task_id)
        return resolved

    @_locked
    def _args_ready(self, task_id: bytes) -> None:
        self._do(self.core.handle(ArgsReady(task_id)))

    @_locked
    def _on_lease_granted(self, sender: str, msg: m.LeaseGranted, bufs: list[Any]) -> None:
        shape = self._shapes.get(self.core.requests.get(msg.request_id, ()))
        if shape is not None:
            self.pending_reasons.pop(shape.name, None)
            if msg.gpu_ids or shape.resources.get("GPU"):
                self._gpu_env[msg.lease_id] = {
                    "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in msg.gpu_ids)}
        # "" for our own node (its returns go over our local socket); another node's leases
        # go back to it directly: our node's record of a lease it forwarded may be gone (it
        # took that node for dead, and the node came back), and the lease leaked.
        client = self.client
        remote = sender not in (client.node_address, client.node_identity)
        self._do(self.core.handle(LeaseGranted(msg.request_id, msg.lease_id,
                                               msg.worker_address, sender, remote)))

    @_locked
    def _on_lease_failed(self, sender: str, msg: m.LeaseFailed, bufs: list[Any]) -> None:
        self._do(self.core.handle(LeaseFailed(msg.request_id, msg.error)))

    @_locked
    def _on_revoke(self, sender: str, msg: m.RevokeLease, bufs: list[Any]) -> None:
        self._do(self.core.handle(LeaseRevoked(msg.lease_id)))

    @_locked
    def _on_worker_exited(self, sender: str, msg: m.WorkerExited, bufs: list[Any]) -> None:
        self._held.pop(msg.lease_id, None)  # the core sends them again elsewhere
        if self._direct_leases.pop(msg.lease_id, None) is not None:
            for tid in [t for t, lid in self._direct.items() if lid == msg.lease_id]:
                del self._direct[tid]
        self._gpu_env.pop(msg.lease_id, None)
        self._do(self.core.handle(WorkerExited(msg.lease_id, msg.reason, msg.request_id)))

    def _on_result(self, sender: str, msg: m.TaskResult, bufs: list[Any]) -> None:
        if msg.lent:  # refs inside the returns: held before the arguments are let go
            self.client.lending.take(sender, msg)  # (a stale answer's too: see lending.py)
        task = self.tasks.get(msg.task_id)
        if task is None:
            self.client.actors.on_result(sender, msg)
            return
        try:
            with self.lock:
                self._loop_ident = threading.get_ident()
                placed = self.core.tasks.get(msg.task_id)
                if placed is not None and placed.attempt != msg.attempt:
                    return  # a late or repeated answer of an earlier attempt: not this one's
                self.resends.answered(msg.task_id)
                if (sender, task.fn_id) not in self._fn_known:
                    if len(self._fn_known) > 65536:  # bounded: forgetting costs a resent blob
                        self._fn_known.clear()
                    self._fn_known.add((sender, task.fn_id))
                if self._direct:
                    self._direct_done(msg.task_id)
                self._result(task, sender, msg)
        finally:
            if self._outbox:
                self._flush()

    def _direct_done(self, task_id: bytes) -> None:
        """A directly sent task's result came: once none is in flight on its worker, the
        sends held back for it go (in order)."""
        lid = self._direct.pop(task_id, None)
        if lid is None:
            return
        conn, n = self._direct_leases.pop(lid, (0, 1))
        if n > 1:
            self._direct_leases[lid] = (conn, n - 1)
            return
        for action in self._held.pop(lid, ()):
            self._send(action)

    def _result(self, task: Task, sender: str, msg: m.TaskResult) -> None:
        if msg.borrowed:
            self.client.objects.add_borrower(msg.borrowed, sender)
        retry = bool(task.retry_exceptions) and retryable(task, msg)  # (most tasks: no call)
        if not retry:
            sent = self.core.result_fast(msg.task_id)
            if sent is not False:
                self._finish(task, msg.returns, failed=False)  # `_complete`, inline
                if msg.contained:
                    self.client.hold_returned(sender, task.return_ids(), msg.contained)
                if sent is not True:
                    self._send(sent)
                return
        actions = self.core.handle(Result(msg.task_id, retry))
        if retry and msg.contained and not any(type(a) is Complete for a in actions):
            # retried: nothing keeps this answer, so we borrow none of the sender's refs in
            # it (unsaid, the sender would count us as their borrower for good); said before
            # the attempt that follows goes, which may lend us some of them again
            self.client.hold_returned(sender, [], msg.contained)
        self._do(actions, (sender, msg))

    @_locked
    def _idle(self, lease_id: bytes, stamp: int) -> None:
        self._do(self.core.handle(IdleTimeout(lease_id, stamp)))

    # -- loop thread: actions out ----------------------------------------------------------
    def _do(self, actions: list[Action], result: tuple[str, m.TaskResult] | None = None
            ) -> None:
        loop = self.client.loop
        for action in actions:
            match action:
                case Send():
                    self._send(action)
                case ResolveArgs(tid):
                    self._resolve(self.tasks[tid])
                case RequestLease(rid, key):
                    shape = self._shapes[key]
                    loop.send(self.client.node_address, m.RequestLease(
                        request_id=rid, owner=self.client.address, resources=shape.resources,
                        name=shape.name, strategy=shape.strategy, labels=shape.labels))
                case ReturnLease(lid, retire, to, stop):
                    self._gpu_env.pop(lid, None)
                    loop.send(to or self.client.node_address,
                              m.ReturnLease(lease_id=lid, owner_died=stop, retire=retire))
                case ArmIdle(lid, stamp):
                    loop.call_later(IDLE_LEASE_S, functools.partial(self._idle, lid, stamp))
                case Complete(tid):
                    assert result is not None and result[1].task_id == tid
                    self._complete(self.tasks[tid], *result)
                case Fail():
                    task = self.tasks[action.task_id]
                    self._finish(task, [failure(task, action)], failed=True)
                case CancelOnWorker(tid, worker):
                    task = self.tasks[tid]
                    self._outbox.append((worker, m.CancelTask(
                        task_id=tid, force=task.force_cancel,
                        recursive=task.recursive_cancel)))
                case Rerun(tid, attempt):
                    self._rerun(tid, attempt)
                case _:
                    assert_never(action)

    def _complete(self, task: Task, sender: str, msg: m.TaskResult) -> None:
        self._finish(task, msg.returns, failed=False)
        if msg.contained:
            self.client.hold_returned(sender, task.return_ids(), msg.contained)

    def _hold(self, action: Send) -> None:
        """Queue a send the core decided off the loop (lock held): the loop sends it with
        whatever it decides for that worker meanwhile, in order (`_release`)."""
        self._held.setdefault(action.lease_id, []).append(action)
        self.client.loop.call_soon(self._release, action.lease_id)

    @_locked
    def _release(self, lease_id: bytes) -> None:
        """Send what is held for `lease_id`, in order, unless directly sent tasks are still
        in flight there (their last result releases it: `_direct_done`)."""
        if lease_id in self._direct_leases:
            return
        for action in self._held.pop(lease_id, ()):
            self._send(action)

    def _send(self, action: Send) -> None:
        placed = self.core.tasks.get(action.task_id)
        if placed is None or placed.lease != action.lease_id:
            return  # a held or posted send whose task ended or moved meanwhile
        if action.lease_id in self._direct_leases or action.lease_id in self._held:
            self._held.setdefault(action.lease_id, []).append(action)  # behind those held
            return
        self._outbox.append((action.worker, self._execute(action, LOOP_CONNECTION)))
        # `_note_sent`, inline (once per task sent from the loop)
        self.resends.sent(action, self.client.loop.clock())
        if not self._sweep_armed:
            self._sweep_armed = True
            self.client.loop.call_soon(self._arm_sweep)

    def _flush(self) -> None:
        """Send what `_send` and cancels queued, in order (loop thread, lock released)."""
        out, self._outbox = self._outbox, []
        send = self.client.loop.send
        for to, msg in out:
            send(to, msg)

    def _note_sent(self, action: Send) -> None:
        """Watch a task now out at its worker (lock held); the sweep runs while any is."""
        self.resends.sent(action, self.client.loop.clock())
        if not self._sweep_armed:
            self._sweep_armed = True
            self.client.loop.call_soon(self._arm_sweep)

    def _arm_sweep(self) -> None:
        self.client.loop.call_later(SWEEP_S, self._sweep)

    @_locked
    def _sweep(self) -> None:
        """Send again the tasks whose result is overdue (resend.py): a lost ExecuteTask or
        TaskResult must not leave a get waiting forever."""
        loop = self.client.loop
        tasks = self.core.tasks

        def placed(tid: bytes) -> tuple[bytes, int] | None:
            t = tasks.get(tid)
            return (t.lease, t.attempt) if t is not None else None

        for action in self.resends.due(loop.clock(), placed):
            if action.task_id in self.tasks:  # (the code goes along until answered once)
                loop.send(action.worker, self._execute(action, LOOP_CONNECTION))
        if len(self.resends):
            loop.call_later(SWEEP_S, self._sweep)
        else:
            self._sweep_armed = False

    def _execute(self, action: Send, connection: int) -> m.ExecuteTask:
        """The message that runs the task `action` sends, for a connection (lock held)."""
        task = self.tasks[action.task_id]
        task.attempt = action.attempt
        # the code goes with every task until the worker answered one of them: the message
        # that first carried it may be lost, or overtaken on another connection
        blob = b"" if (action.worker, task.fn_id) in self._fn_known else task.fn_blob
        client = self.client
        return task.message(blob, self._gpu_env.get(action.lease_id), client.address,
                            client.namespace)

    def _finish(self, task: Task, returns: list[m.Value], *, failed: bool) -> None:
        self.tasks.pop(task.task_id, None)
        task.done = True
        objects = self.client.objects
        rebuildable: bool | None = None  # worked out for the first stored value only
        for i, oid in enumerate(task.return_ids()):
            value = returns[i] if i < len(returns) else returns[0]
            if value.loc is not None:
                if rebuildable is None:
                    rebuildable = (not failed and not pinned_to_a_node(task.strategy)
                                   and all(v is not None and v.loc is None
                                           for v in task.ref_values))
                if rebuildable:
                    entry = objects.entries.get(oid)
                    if entry is not None:
                        entry.lineage = task  # its only copies live in stores: keep the recipe
            if objects.set_value(oid, value) is None and value.loc is not None:
                self.client.loop.send(self.client.node_address, m.FreeObjects(
                    object_ids=[oid], node=value.loc.node))
        if task.top_refs or task.nested_ids:
            ids = [r.id for r in task.top_refs] + task.nested_ids
            task.top_refs = []
            task.nested_ids = []
            objects.remove_submitted(ids)

    @_locked
    def rebuild(self, object_id: bytes) -> None:
        """Run again the task that made `object_id`, whose stored copy was lost (lineage).

        Its returns wait for the new values; if it has no retries left they keep the error.
        """
        entry = self.client.objects.entries.get(object_id)
        task = None if entry is None else entry.lineage
        if task is None or not task.done:
            return  # gone, not rebuildable, or already being rebuilt
        self._rebuilding = task
        try:
            self._do(self.core.handle(Rebuild(
                task.task_id, task.key, task.max_retries, task.attempt, bool(task.resources),
                task.max_calls)))
        finally:
            self._rebuilding = None

    def _rerun(self, task_id: bytes, attempt: int) -> None:
        task = self._rebuilding
        assert task is not None and task.task_id == task_id
        task.attempt = attempt
        task.done = False
        with self.client.objects.lock:
            for oid in task.return_ids():
                e = self.client.objects.entries.get(oid)
                if e is not None:
                    e.value = None
                    e.lineage = None
        self.tasks[task_id] = task

    # -- cancellation ----------------------------------------------------------------------
    @_locked
    def cancel(self, task_id: bytes, force: bool, recursive: bool = True) -> None:
        task = self.tasks.get(task_id)
        if task is None:
            return
        task.force_cancel, task.recursive_cancel = force, recursive
        self._do(self.core.handle(Cancel(task_id)))

    @_locked
    def cancel_children(self, parent: bytes, force: bool) -> None:
        """Cancel the unfinished tasks that `parent` submitted, and theirs (loop thread)."""
        for task in [t for t in self.tasks.values() if t.parent == parent]:
            self.cancel(task.task_id, force, recursive=True)

    def pending_reason(self, task_id: bytes) -> str:
        task = self.tasks.get(task_id)
        if task is None or self.core.running(task_id):
            return ""
        return self.pending_reasons.get(task.name, "")
