"""Running user code in a worker: tasks, actor construction and actor method calls.

The loop thread hands work over a queue; user code runs on the executor thread (or a thread
pool for threaded actors, or an asyncio loop for async actors), so the loop keeps answering.
A sync actor's calls skip the loop: the executor thread receives them itself
(`actor_inbox`).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import os
import queue
import threading
from collections import OrderedDict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from types import CoroutineType
from typing import TYPE_CHECKING, Any

import cloudpickle

from zmesh import runtime_env
from zmesh.core.mailbox import Mailbox
from zmesh.errors import (
    ActorExit,
    GetTimeoutError,
    ObjectLostError,
    TaskCancelledError,
    TaskInterrupt,
)
from zmesh.protocol.messages import runtime as m
from zmesh.ray_compat import install_if_requested
from zmesh.runtime.args import unpack_args
from zmesh.runtime.ids import IdGen
from zmesh.runtime.owner.actor_calls import CANCELLED_CALL
from zmesh.runtime.owner.lending import lend_token
from zmesh.runtime.strategies import placement_of
from zmesh.runtime.values import NONE_VALUE
from zmesh.runtime.worker import events, logs, streaming
from zmesh.runtime.worker.actor_inbox import ActorInbox, SpareInbox
from zmesh.runtime.worker.async_actor import TERMINATE, TERMINATED, AsyncActorCalls
from zmesh.runtime.worker.concurrency import ConcurrencyGroups
from zmesh.runtime.worker.outcomes import apply_env, cancelled_value, error_value, switch_env
from zmesh.runtime.worker.recent_tasks import CallReplies, RecentTasks
from zmesh.runtime.worker.return_refs import ReturnRefs
from zmesh.tensor_transport import push as tensor_push

if TYPE_CHECKING:
    from zmesh.runtime.owner.client import CoreClient




FORGOTTEN_GRACE_S = 3.0
"""How long a repeat whose answer is no longer kept waits before it fails: the answer may
still be queued on another connection, and the error must not overtake it."""


GIVE_WAY_S = 1.0
"""How long a task waits for a pending argument before it checks for work queued behind it
(`Executor._wait_pending`)."""


class _GiveWay(Exception):
    """A task waiting for an argument gives way to the work queued behind it."""


class Executor(AsyncActorCalls):
    """Executes what the loop receives; one per worker process."""

    def __init__(self, client: CoreClient) -> None:
        self.client = client
        self.pid = os.getpid()
        self.functions: dict[bytes, Any] = {}
        self.produced: OrderedDict[bytes, m.Value] = OrderedDict()  # recent results, for chained tasks
        self.return_refs = ReturnRefs(client)  # refs in results, arguments kept
        self.work: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.mailbox: Mailbox[m.ActorCall] = Mailbox()
        self.instance: Any = None
        self.actor: m.CreateActor | None = None
        self.pool: ThreadPoolExecutor | None = None
        self.aio: asyncio.AbstractEventLoop | None = None
        self.aio_sem: asyncio.Semaphore | None = None
        self.groups: ConcurrencyGroups | None = None
        self.running: bytes = b""
        self.cancelled: set[bytes] = set()
        # set once the actor exits (exit_actor, __ray_terminate__): calls queued behind the
        # exit never run; their callers fail when the node publishes the actor dead
        self.exited = False
        self.async_calls: dict[bytes, asyncio.Task[Any]] = {}  # running calls of an async actor
        self._names: dict[str, str] = {}  # method -> "Class.method", once the actor exists
        self._cancel_lock = threading.Lock()
        # the worker's own values of the variables the last task's env changed (it stays
        # set until a task with another env or an actor comes: no putenv per task)
        self._env_saved: dict[str, str | None] = {}
        # the env the last task set (None: none set yet, or an actor's): a task with the
        # same env finds it set and reads no variable (os.environ.get costs ~1 us a key);
        # as in Ray, a variable that task code changed stays so for the worker's next tasks
        self._env_now: dict[str, str] | None = None
        self._prefix_of = ""  # the task name the log prefix was last set for
        self.inbox: ActorInbox | None = None  # a sync actor's own endpoint for its calls
        self.spare = SpareInbox(self._open_inbox)  # opened before the first work comes
        self.thread = threading.Thread(target=self._run, name="zmesh-executor", daemon=True)
        loop = client.loop
        self.recent = RecentTasks()  # a task its owner sends again runs at most once
        self.replies = CallReplies()  # an actor call its caller sends again is answered again
        loop.on(m.ExecuteTask, self._on_execute)
        loop.on(m.CreateActor, lambda s, msg, b: self.work.put(msg))
        loop.on(m.ActorCall, self._on_call)
        loop.on(m.CancelTask, self._on_cancel)

    def start(self) -> None:
        self.thread.start()

    # -- loop thread -----------------------------------------------------------------------
    def _on_execute(self, sender: str, msg: m.ExecuteTask, bufs: list[Any]) -> None:
        run, answer = self.recent.take(msg)
        if run:
            self.work.put(msg)
        elif answer is not None:  # it ran: its result was lost on the way; send it again
            self.client.lending.answer_on_loop(msg.owner, answer)  # (or when it may go)

    def _on_call(self, sender: str, msg: m.ActorCall, bufs: list[Any]) -> None:
        if self.inbox is not None:  # (callers send to the inbox: one that came here anyway
            self.inbox.forward(sender, msg)  # joins the others on the inbox's thread)
            return
        for call in self._admit(msg):
            if self.aio is not None:
                self.aio.call_soon_threadsafe(self._start_async_call, call)
            elif self.groups is not None:
                self.groups.submit(self._call, call, self._reject)
            elif self.pool is not None:
                self.pool.submit(self._call, call)
            else:
                self.work.put(call)

    def _admit(self, msg: m.ActorCall) -> list[m.ActorCall]:
        """The calls `msg` lets run now, in their caller's order (the loop thread's, or the
        executor's with an inbox). A repeat of a call that ran or runs releases none: its
        kept answer goes again (from the loop)."""
        if self.mailbox.released(msg.caller, msg.seq):  # sent again: it ran or runs
            answer, forgotten = self.replies.repeat(msg.task_id)
            loop = self.client.loop
            if answer is not None:  # its answer was lost on the way: send it again
                loop.call_soon(self.client.lending.answer_on_loop, msg.caller, answer)
            elif forgotten:  # it ran, and its answer is no longer kept: sent long ago and
                # lost, or still stuck in a backed-up queue on the call thread's connection,
                # which this error (sent by the loop) could overtake: give it a grace first
                loop.call_soon(loop.call_later, FORGOTTEN_GRACE_S,
                               functools.partial(self._answer_forgotten, msg))
            return []
        if msg.args.refs and tensor_push.flagged_markers(msg.args):
            from zmesh.tensor_transport.consumer import receive_early

            receive_early(msg.args)  # its pushes' data moves while the call waits its turn
        calls = self.mailbox.deliver(msg.caller, msg.seq, msg)
        for call in calls:
            self.replies.expect(call.task_id)
        return calls

    def _on_inbox_call(self, sender: str, msg: m.ActorCall) -> None:
        """A call from the inbox (executor thread): run what it releases, here and now."""
        for call in self._admit(msg):
            try:
                self._call(call)
            except (TaskCancelledError, TaskInterrupt):
                pass  # the cancel landed after the call finished

    def close(self) -> None:
        """Close the actor's inbox, if it has one (the worker is exiting; any thread)."""
        self.spare.discard()
        if self.inbox is not None:
            self.inbox.stop()

    def _on_cancel(self, sender: str, msg: m.CancelTask, bufs: list[Any]) -> None:
        if msg.force:
            os._exit(1)
        self.cancelled.add(msg.task_id)
        if msg.recursive:
            self.client.tasks.cancel_children(msg.task_id, False)
            self.client.actors.cancel_children(msg.task_id)
        if self.actor is not None:
            # as Ray: a queued actor task never runs; a running one is interrupted only in
            # an async actor (a sync actor's state must not be torn mid-method)
            if msg.task_id in self.async_calls and self.aio is not None:
                self.aio.call_soon_threadsafe(self._cancel_async, msg.task_id)
            return
        with self._cancel_lock:
            if self.running == msg.task_id and self.thread.ident is not None:
                waiter = self.client.interruptible.get(self.thread.ident)
                if waiter is not None:  # blocked in get/wait: end that wait with the cancel
                    waiter.cancel()
                    return
                ctypes.pythonapi.PyThreadState_SetAsyncExc(
                    ctypes.c_ulong(self.thread.ident), ctypes.py_object(TaskInterrupt))

    @contextlib.contextmanager
    def _shielded(self) -> Iterator[None]:
        """No cancel lands inside (a streaming generator's send); one that came meanwhile
        is raised on leaving."""
        task_id = self.running
        if threading.current_thread() is not self.thread or not task_id:
            yield
            return
        with self._cancel_lock:  # a cancel already sent lands at the latest on this exit
            self.running = b""
        try:
            yield
        finally:
            self.running = task_id
        if task_id in self.cancelled:
            raise TaskCancelledError

    # -- executor thread -------------------------------------------------------------------
    def _run(self) -> None:
        self.spare.prepare()  # off the critical path: a sync actor's "alive" need not wait
        while True:
            item = self.work.get()
            try:
                if isinstance(item, m.ExecuteTask):
                    self._task(item)
                elif isinstance(item, m.ActorCall):
                    self._call(item)
                elif isinstance(item, m.CreateActor):
                    self._create_actor(item)
                    self.spare.discard()  # (not a sync actor, or its __init__ raised)
                    if self.inbox is not None:  # its calls come there from now on
                        why = self.inbox.serve(self._on_inbox_call)
                        if why and not self.exited:  # none can come: its callers must
                            self._exit_actor(why)  # hear it is gone, not wait
            except (TaskCancelledError, TaskInterrupt):
                pass  # the cancel landed after the task finished
            self.spare.discard()  # not an actor's worker (its first work decides)

    def _function(self, fn_id: bytes, blob: bytes) -> Any:
        fn = self.functions.get(fn_id)
        if fn is None:
            install_if_requested()  # before loading: user code may `import ray` (Ray-compat)
            if not blob:
                blob = self.client.query("function", fn_id)
            fn = self.functions[fn_id] = cloudpickle.loads(blob)
        return fn

    def _task(self, msg: m.ExecuteTask) -> None:
        client = self.client
        n = max(msg.num_returns, 1)
        if msg.task_id in self.cancelled:
            self.recent.finished(msg.task_id, msg.attempt, self._reply(
                msg.owner, msg.task_id, [cancelled_value(msg.name)] * n, [], msg.attempt))
            return
        env = msg.env_vars
        if env != self._env_now:
            switch_env(self._env_saved, env)
            self._env_now = env
        events.recorder.begin(msg.task_id, msg.name, "task")
        if msg.name != self._prefix_of:
            self._prefix_of = msg.name
            logs.set_prefix(f"({msg.name} pid={self.pid})")
        client.current_task_id = msg.task_id
        client.assigned_resources = msg.resources
        if msg.strategy:  # (most tasks have none: no call)
            client.current_placement_group, client.inherited_strategy = \
                placement_of(msg.strategy)
        client.namespace = msg.namespace or "default"
        self.running = msg.task_id
        refs: list[Any] = []
        code_env = None
        try:
            if runtime_env.ENV_KEY in msg.env_vars:
                code_env = runtime_env.enter(client, msg.env_vars)
            packed = self._resolve_pending(msg) if msg.ref_ids else msg.args
            fn = self._function(msg.fn_id, msg.fn_blob)
            args, kwargs, refs = unpack_args(packed, client.read)
            result = fn(*args, **kwargs)
            if isinstance(result, CoroutineType):  # an `async def` task runs to the end here
                result = asyncio.run(result)
            del args, kwargs
            if msg.num_returns < 0:  # a streaming generator: cancel may interrupt it
                returns = streaming.run_task(self.client, self.pid, self._shielded,
                                             msg.task_id, result, msg.num_returns, msg.name,
                                             msg.owner, msg.backpressure)
            self.running = b""
            if msg.num_returns >= 0:
                returns = self._encode_returns(msg.task_id, result, msg.num_returns, msg.name,
                                               msg.owner, msg.attempt, refs)
                result = None  # (what it holds is not kept by this worker any more)
        except _GiveWay:  # (before any user code ran): it goes behind the work queued here
            self.running = b""
            events.recorder.end(msg.task_id, True)
            self.work.put(msg)
            return
        except BaseException as exc:  # noqa: BLE001 - user code may raise anything
            self.running = b""
            returns = self.return_refs.error_returns(msg.task_id, msg.attempt, msg.owner,
                                                     msg.name, exc, n, self.pid, refs)
        finally:
            if code_env is not None:
                runtime_env.leave(code_env)
            client.current_task_id = b""
            client.current_placement_group, client.inherited_strategy = None, b""
        self.recent.finished(msg.task_id, msg.attempt,
                             self._reply(msg.owner, msg.task_id, returns, refs, msg.attempt))

    def _resolve_pending(self, msg: m.ExecuteTask) -> m.Args:
        """Fill in arguments the owner sent as pending: from values this worker made itself,
        else from the owner (which answers once the value exists)."""
        from zmesh.object_ref import ObjectRef

        out = []
        for value, oid in zip(msg.args.refs, msg.ref_ids):
            if value.data or value.loc is not None:
                out.append(value)
                continue
            mine = self.produced.get(oid)
            if mine is None:
                ref = ObjectRef(oid, msg.owner, self.client)
                mine = self._wait_pending(ref)
                del ref
            out.append(mine)
        return m.Args(data=msg.args.data, refs=out)

    def _wait_pending(self, ref: Any) -> m.Value:
        """A pending argument's value from its owner. The task may have followed its
        argument's producer onto this lease and come first: the producer's ExecuteTask was
        lost (a link that broke) and its owner sends it again later, behind this task.
        Waiting here for good would wait for a task queued behind this one (the owner
        waits for that task's result, and this worker runs one task at a time: the chain
        hung). So while other work is queued here, the wait gives way to it (`_GiveWay`:
        the task goes to the back of the queue, before any user code ran)."""
        client = self.client
        while True:
            try:
                return client._wait_values([ref], client.loop.clock() + GIVE_WAY_S)[0]
            except GetTimeoutError:
                if not self.work.empty():
                    raise _GiveWay from None

    def _encode_returns(self, task_id: bytes, result: Any, num_returns: int, name: str,
                        owner: str, attempt: int, args: list[Any]) -> list[m.Value]:
        if num_returns == 1:
            if result is None:  # the commonest answer: no id made, no serializer run
                return [NONE_VALUE]
            items = [result]
        elif num_returns == 0:
            return [NONE_VALUE]
        else:
            items = list(result)
            if len(items) != num_returns:
                raise ValueError(f"{name} returned {len(items)} values; num_returns={num_returns}")
        out = []
        nested_of: list[tuple[int, list[Any]]] = []
        for i, item in enumerate(items):
            value, nested = self.client.encode(item, IdGen.object_id(task_id, i), for_owner=owner)
            if nested:
                nested_of.append((i, nested))
            out.append(value)
        if nested_of:
            self.return_refs.hand_over(task_id, attempt, owner, nested_of, args)
        return out

    def _reply(self, owner: str, task_id: bytes, returns: list[m.Value], refs: list[Any],
               attempt: int = 0) -> m.TaskResult:
        """Send a task's result to its owner; the message, to send again if asked."""
        ok = True
        for value in returns:
            if value.is_error:
                ok = False
        if self.actor is None:  # (kept for the chained tasks of this worker; an actor has none)
            produced = self.produced
            for i, value in enumerate(returns):
                produced[IdGen.object_id(task_id, i)] = value
            while len(produced) > 256:  # (an OrderedDict: a dict's oldest key is found by a scan)
                produced.popitem(last=False)
        events.recorder.end(task_id, ok)
        borrowed: list[bytes] = []
        waits = False
        if refs:
            borrowed, waits = self.return_refs.still_held(refs, owner, lend_token(task_id, attempt))
        contained, lent = self.return_refs.pop(task_id)
        result = m.TaskResult(task_id=task_id, returns=returns, borrowed=borrowed,
                              contained=contained, attempt=attempt, lent=lent)
        if borrowed or lent or waits:  # before our later RemoveBorrowers to the owner (same
            # connection); held back until the owners we told of refs handed on acknowledged
            self.client.lending.answer(owner, result)
        else:
            self.client.send_direct(owner, result)
        if self.actor is not None:
            self.replies.put(result)
        return result

    # -- actors ----------------------------------------------------------------------------
    def _create_actor(self, spec: m.CreateActor) -> None:
        client = self.client
        client.current_actor_id = spec.actor_id
        client.actor_restarts = spec.restarts  # type: ignore[attr-defined]
        client.assigned_resources = dict(spec.resources)
        client.namespace = spec.namespace or client.namespace
        client.current_placement_group, client.inherited_strategy = placement_of(spec.strategy)
        switch_env(self._env_saved, {})  # nothing of a task's env stays for the actor
        self._env_now = None
        self._prefix_of = ""
        apply_env(spec.env_vars)
        logs.set_prefix(f"({spec.class_name} pid={self.pid})")
        try:
            if runtime_env.ENV_KEY in spec.env_vars:  # for the actor's life: never left
                runtime_env.enter(client, spec.env_vars)
            cls = self._function(spec.fn_id, spec.fn_blob)
            client.current_actor_class = cls
            args, kwargs, _ = unpack_args(spec.args, client.read)
            self.instance = cls(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001
            err = error_value(f"{spec.class_name}.__init__", exc, self.pid)
            client.loop.send_threadsafe(client.node_address, m.ActorState(
                actor_id=spec.actor_id, state="dead", error=err.data,
                reason=f"{spec.class_name}.__init__ raised {type(exc).__name__}: {exc}",
                class_name=spec.class_name))
            return
        self.actor = spec
        if spec.concurrency_groups:
            self.groups = ConcurrencyGroups(type(self.instance), spec.concurrency_groups,
                                            spec.max_concurrency, spec.is_async)
        if spec.is_async:
            self._start_asyncio(spec.max_concurrency)
        elif spec.max_concurrency > 1 and self.groups is None:
            self.pool = ThreadPoolExecutor(spec.max_concurrency, thread_name_prefix="zmesh-actor")
        elif self.groups is None and not spec.is_async:  # one call at a time, on this thread
            self.inbox = self.spare.claim() or self._open_inbox()
        client.loop.send_threadsafe(client.node_address, m.ActorState(
            actor_id=spec.actor_id, state="alive", address=client.address,
            class_name=spec.class_name, restarts=spec.restarts,
            call_address=self.inbox.address if self.inbox is not None else ""))

    def _open_inbox(self) -> ActorInbox | None:
        """The endpoint this actor's calls come to, received by this thread (or None: they
        come through the loop)."""
        return ActorInbox.open_beside(self.client.address)

    def _invoke(self, call: m.ActorCall) -> tuple[Any, list[Any]]:
        if call.task_id in self.cancelled or call.method == CANCELLED_CALL:
            raise TaskCancelledError(f"task {self._method_name(call)} was cancelled")
        if call.method == TERMINATE:
            raise ActorExit(TERMINATED)
        args, kwargs, refs = unpack_args(call.args, self.client.read)
        if refs:  # (borrowed from a third process: registered before the call runs)
            self.return_refs.register_args(refs, call.caller,
                                           lend_token(call.task_id, call.attempt), wait=True)
        method = getattr(self.instance, call.method)
        return method(*args, **kwargs), refs

    def _call(self, call: m.ActorCall) -> None:
        if self.exited:
            return
        name = self._method_name(call)
        events.recorder.begin(call.task_id, name, "actor_call")
        refs: list[Any] = []
        self.running = call.task_id
        self.client.current_task_id = call.task_id
        try:
            result, refs = self._invoke(call)
            if call.num_returns < 0:
                returns = streaming.run_task(self.client, self.pid, self._shielded,
                                             call.task_id, result, call.num_returns, name,
                                             call.caller, call.backpressure)
            self.running = b""
            if call.num_returns >= 0:
                returns = self._encode_returns(call.task_id, result, call.num_returns, name,
                                               call.caller, call.attempt, refs)
                result = None  # (what it holds is not kept by this worker any more)
        except ActorExit as exc:
            self.running = b""
            self._exit_actor(exc.why)
            return
        except BaseException as exc:  # noqa: BLE001
            self.running = b""
            returns = self.return_refs.error_returns(call.task_id, call.attempt, call.caller,
                                                     name, exc, max(call.num_returns, 1),
                                                     self.pid, refs)
        self._reply(call.caller, call.task_id, returns, refs, call.attempt)

    def _reject(self, call: m.ActorCall, exc: BaseException) -> None:
        """Answer a call with an error instead of running it (an unknown concurrency group, a
        cancel before it ran, an answer no longer kept)."""
        error = error_value(self._method_name(call), exc, self.pid)
        self._reply(call.caller, call.task_id, [error] * max(call.num_returns, 1), [],
                    call.attempt)

    def _method_name(self, call: m.ActorCall) -> str:
        name = self._names.get(call.method)  # (one string per method, not one per call)
        if name is None:
            cls = self.actor.class_name if self.actor is not None else "actor"
            name = f"{cls}.{call.method}"
            if self.actor is not None and len(self._names) < 1024:
                self._names[call.method] = name
        return name

    def _answer_forgotten(self, call: m.ActorCall) -> None:
        self._reject(call, ObjectLostError(
            f"the answer of {self._method_name(call)} (call {call.task_id.hex()}) was lost on "
            "its way back and is no longer kept by the actor; the call ran and is not run again"))

    def _answer_cancelled(self, call: m.ActorCall) -> None:
        self._reject(call, TaskCancelledError(f"task {self._method_name(call)} was cancelled"))

    def _exit_actor(self, why: str) -> None:
        """A graceful exit: the user's atexit handlers run, then the node is told that the
        actor is dead for good (it ends this worker, and callers fail with `why`)."""
        import atexit

        self.exited = True
        try:
            atexit._run_exitfuncs()
        finally:
            spec = self.actor
            if spec is not None:
                self.client.loop.send_threadsafe(self.client.node_address, m.ActorState(
                    actor_id=spec.actor_id, state="dead", reason=why,
                    class_name=spec.class_name))
