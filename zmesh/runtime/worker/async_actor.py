"""An async actor's calls: an asyncio loop on a thread of its own runs them, at most
`max_concurrency` at once (or per concurrency group), each cancellable while it waits.

A mixin of `Executor` (executor.py), kept apart because the sync paths (tasks, a sync
actor's calls) are the hot ones there and this one has its own loop and rules.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable, Coroutine
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, cast

from zmesh.errors import ActorExit, TaskCancelledError
from zmesh.protocol.messages import runtime as m
from zmesh.runtime.args import unpack_args
from zmesh.runtime.owner.actor_calls import CANCELLED_CALL
from zmesh.runtime.owner.lending import lend_token
from zmesh.runtime.worker import events, streaming

if TYPE_CHECKING:
    from zmesh.runtime.owner.client import CoreClient
    from zmesh.runtime.worker.concurrency import ConcurrencyGroups
    from zmesh.runtime.worker.return_refs import ReturnRefs

TERMINATE = "__ray_terminate__"
TERMINATED = "it was terminated by __ray_terminate__"


class AsyncActorCalls:
    """The async actor half of the executor (its state lives on the Executor)."""

    client: CoreClient
    pid: int
    instance: Any
    exited: bool
    cancelled: set[bytes]
    return_refs: ReturnRefs
    groups: ConcurrencyGroups | None
    aio: asyncio.AbstractEventLoop | None
    aio_sem: asyncio.Semaphore | None
    async_calls: dict[bytes, asyncio.Task[Any]]
    _shielded: Callable[[], AbstractContextManager[None]]

    def _method_name(self, call: m.ActorCall) -> str:
        raise NotImplementedError  # (Executor's)

    def _reject(self, call: m.ActorCall, exc: BaseException) -> None:
        raise NotImplementedError  # (Executor's)

    def _answer_cancelled(self, call: m.ActorCall) -> None:
        raise NotImplementedError  # (Executor's)

    def _exit_actor(self, why: str) -> None:
        raise NotImplementedError  # (Executor's)

    def _encode_returns(self, task_id: bytes, result: Any, num_returns: int, name: str,
                        owner: str, attempt: int, args: list[Any]) -> list[m.Value]:
        raise NotImplementedError  # (Executor's)

    def _reply(self, owner: str, task_id: bytes, returns: list[m.Value], refs: list[Any],
               attempt: int = 0) -> m.TaskResult:
        raise NotImplementedError  # (Executor's)

    def _start_asyncio(self, max_concurrency: int) -> None:
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            self.aio = loop
            self.aio_sem = asyncio.Semaphore(max_concurrency)
            ready.set()
            loop.run_forever()

        threading.Thread(target=run, name="zmesh-asyncio", daemon=True).start()
        ready.wait()

    def _start_async_call(self, call: m.ActorCall) -> None:
        assert self.aio is not None
        # the call removes itself when it ends (no done callback: one loop turn less a call)
        self.async_calls[call.task_id] = self.aio.create_task(self._async_call(call))

    def _cancel_async(self, task_id: bytes) -> None:  # the actor's event loop
        task = self.async_calls.get(task_id)
        if task is None:
            return
        coro = cast("Coroutine[Any, Any, Any]", task.get_coro())
        if inspect.getcoroutinestate(coro) != inspect.CORO_CREATED:
            task.cancel()  # (one not started yet finds itself in `cancelled` and answers)

    async def _async_call(self, call: m.ActorCall) -> None:
        try:
            await self._async_call_body(call)
        except asyncio.CancelledError:  # cancelled while it queued for its semaphore
            if not self.exited:
                self._answer_cancelled(call)
        finally:
            self.async_calls.pop(call.task_id, None)

    async def _async_call_body(self, call: m.ActorCall) -> None:
        assert self.aio_sem is not None
        if self.exited:
            return
        name = self._method_name(call)
        events.recorder.begin(call.task_id, name, "actor_call")
        refs: list[Any] = []
        sem = self.aio_sem
        if self.groups is not None:
            try:
                sem = self.groups.semaphore(call)
            except ValueError as exc:
                self._reject(call, exc)
                return
        if call.task_id in self.cancelled:  # before it queues for a slot
            self._answer_cancelled(call)
            return
        async with sem:
            try:
                if call.task_id in self.cancelled or call.method == CANCELLED_CALL:
                    raise TaskCancelledError(f"task {name} was cancelled")
                if call.method == TERMINATE:
                    raise ActorExit(TERMINATED)
                args, kwargs, refs = unpack_args(call.args, self.client.read)
                if refs:
                    self.return_refs.register_args(refs, call.caller,
                                                   lend_token(call.task_id, call.attempt))
                method = getattr(self.instance, call.method)
                if call.num_returns < 0:
                    returns = await streaming.run_call_async(
                        self.client, self.pid, self._shielded, call, name, method, args, kwargs)
                elif inspect.iscoroutinefunction(method):
                    result = await method(*args, **kwargs)
                else:
                    result = await asyncio.get_running_loop().run_in_executor(
                        None, lambda: method(*args, **kwargs))
                if call.num_returns >= 0:
                    returns = self._encode_returns(call.task_id, result, call.num_returns,
                                                   name, call.caller, call.attempt, refs)
                    result = None  # (what it holds is not kept by this worker any more)
            except ActorExit as exc:
                self._exit_actor(exc.why)
                return
            except BaseException as exc:  # noqa: BLE001
                returns = self.return_refs.error_returns(
                    call.task_id, call.attempt, call.caller, name, exc,
                    max(call.num_returns, 1), self.pid, refs)
        self._reply(call.caller, call.task_id, returns, refs, call.attempt)
