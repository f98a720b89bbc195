"""Calling actors: the shell of `core/actor_caller.py`; calls go straight to the actor's worker.

The core numbers the calls, queues them until the actor's address is known, retries in-flight
calls up to max_task_retries after a restart and fails the rest; this shell feeds it the
node's news (ActorState), the answers and the caller's kills, and carries out its actions:
sends, and failures with ActorDiedError / ActorUnavailableError saying why.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from zmesh.core.actor_caller import (
    Action,
    ActorAlive,
    ActorCallerCore,
    ActorDead,
    ActorRestarting,
    Done,
    Event,
    Fail,
    Hold,
    Ready,
    Send,
    SendFailed,
    State,
    Submit,
    Track,
)
from zmesh.core.exhaustive import assert_never
from zmesh.core.ownership import BorrowerGone, HoldArgs, ReleaseArgs
from zmesh.errors import ActorDiedError, ActorUnavailableError
from zmesh.protocol.messages import runtime as m
from zmesh.runtime import values
from zmesh.runtime.ids import IdGen
from zmesh.runtime.loop import EventLoop
from zmesh.runtime.owner.call_resends import CallResends
from zmesh.runtime.owner.task_record import covered
from zmesh.task_error import ActorInitError, TaskError
from zmesh.tensor_transport import push as tensor_push

if TYPE_CHECKING:
    from zmesh.runtime.owner.client import CoreClient


_NO_ARGS = m.Args()  # shared by calls without arguments (Args is frozen)
_NO_IDS: tuple[bytes, ...] = ()  # the `release` of calls without ref arguments
_ONE = (0,)  # the return indexes of a call with one return (or none: num_returns 0 or -1)

CANCELLED_CALL = "__zmesh_cancelled__"
"""The method name a call cancelled before it was sent goes with."""

DEATH_GRACE_S = 1.0
"""How long calls out to an actor reported dead wait for answers already on their way."""


class Call(msgspec.Struct, eq=False):
    """What the shell keeps of one call until it completes: the message is built at send."""

    rec: ActorRecord
    task_id: bytes
    method: str
    args: m.Args
    num_returns: int
    release: Sequence[bytes]  # the ref arguments it holds until it completes
    backpressure: int = 0
    group: str = ""
    parent: bytes = b""  # the task that made the call (cancel(recursive=True) follows it)
    retries: int | None = None  # the method's or call's max_task_retries (None: the actor's)
    retry_exceptions: Any = False  # the exceptions that send it again (True: any)
    attempt: int = 0  # sent again by retry_exceptions: only this attempt's answer counts
    pushes: Any = None  # tensor-transport refs among its arguments: (key, producer), sent once


class ActorRecord(msgspec.Struct, eq=False, dict=True):
    """What a caller knows of one actor beyond the ordering core's state."""

    actor_id: bytes
    class_name: str
    address: str = ""
    error: m.Value | None = None
    max_task_retries: int = 0
    resolving: int = 0  # calls whose arguments resolve before they are numbered (unordered)
    killing: bool = False  # this caller asked for a kill without restart, not yet applied
    out_of_scope: bool = False  # its last handle went: it ends once our calls complete
    ctor_refs: list[Any] = msgspec.field(default_factory=list)  # constructor ref arguments, held
    unordered: bool = False  # threaded or async: calls need not run in submission order
    killed_incarnation: int = -1  # an "alive" for it is stale news
    incarnation: int = -1


class ActorCaller:
    """Caller-side actor state; `call`/`create`/`track` run on user threads, the rest on the loop.

    Ordering, retries and failures are decided by `ActorCallerCore` (under `_lock`, since
    user threads submit); this shell carries out its actions: `Send` from a user thread
    goes straight to the worker, from the loop through the loop's socket."""

    def __init__(self, client: CoreClient) -> None:
        self.client = client
        self.records: dict[bytes, ActorRecord] = {}
        self.core = ActorCallerCore()
        self.calls: dict[bytes, Call] = {}  # task id -> an open call
        self._by_address: dict[str, ActorRecord] = {}
        # an actor's call address (ActorState.call_address) -> its worker's address
        self._worker_of: dict[str, str] = {}
        self._lock = threading.Lock()
        self.pending_reasons: dict[str, str] = {}
        self.lives: dict[bytes, bytes] = {}  # handle-count id -> actor id (actors we created)
        self.resends = CallResends(client.loop, self.calls)  # unanswered calls go again

    def register(self, loop: EventLoop) -> None:
        loop.on(m.ActorState, self._on_state)

    def _handle(self, event: Event) -> list[Action]:
        with self._lock:
            return self.core.handle(event)

    def _carry(self, actions: list[Action], on_loop: bool = True) -> None:
        """Carry out the core's actions (loop thread, or a user thread with `on_loop` False)."""
        for action in actions:
            match action:
                case Send():
                    call = self.calls.get(action.task_id)
                    if call is None:
                        continue
                    if call.pushes:  # their producers start sending to the callee now,
                        worker = self._worker_of.get(action.address, action.address)
                        ordered = tensor_push.order(  # and it posts their receives as the
                            self.client, worker, call.pushes, on_loop)  # call comes in
                        call.args = tensor_push.flagged(call.args, ordered)
                        call.pushes = None
                    msg = self._message(call, action.seq)
                    self.resends.sent(action.address, msg)
                    if not on_loop:
                        self.client.send_direct(action.address, msg)
                    elif not self.client.loop.send(action.address, msg):
                        self._carry(self._handle(SendFailed(action.actor_id, action.task_id)))
                        self.client.loop.send(self.client.node_address, m.SubscribeActor(
                            actor_id=action.actor_id, subscriber=self.client.address))
                case Fail():
                    if not on_loop:
                        self.client.loop.call_soon(self._carry, [action])
                        continue
                    call = self.calls.pop(action.task_id, None)
                    if call is not None:
                        rec = call.rec
                        value = (self._unavailable_value(rec, action.reason, call)
                                 if action.unavailable else rec.error or values.encode_error(
                                     ActorDiedError(f"actor {rec.class_name!r} is dead")))
                        self._complete(call, [value] * max(call.num_returns, 1))
                        self._settled(rec)
                case Done():
                    pass  # on_result completes the call itself
                case _:
                    assert_never(action)

    def _message(self, call: Call, seq: int) -> m.ActorCall:
        return m.ActorCall(actor_id=call.rec.actor_id, caller=self.client.address, seq=seq,
                           task_id=call.task_id, method=call.method, args=call.args,
                           num_returns=call.num_returns, backpressure=call.backpressure,
                           concurrency_group=call.group, attempt=call.attempt)

    # -- user threads ----------------------------------------------------------------------
    def track(self, actor_id: bytes, class_name: str, max_task_retries: int = 0,
              subscribe: bool = True) -> ActorRecord:
        """The record for an actor, subscribing to its state the first time it is seen."""
        rec = self.records.get(actor_id)  # every call asks: no lock once it exists
        if rec is not None:
            return rec
        with self._lock:
            rec = self.records.get(actor_id)
            if rec is not None:
                return rec
            rec = self.records[actor_id] = ActorRecord(actor_id, class_name,
                                                       max_task_retries=max_task_retries)
            self.core.handle(Track(actor_id, max_task_retries))
        if subscribe:
            self.client.loop.send_threadsafe(self.client.node_address, m.SubscribeActor(
                actor_id=actor_id, subscriber=self.client.address))
        return rec

    def create(self, spec: m.CreateActor, max_task_retries: int,
               top_refs: Sequence[Any] = (), nested: Sequence[Any] = ()) -> None:
        """Start an actor; with `top_refs` (ref arguments of the constructor), once they are
        ready, their values going with the spec. Every ref of its arguments (`nested`: the
        ones inside them) is held while the actor lives (`HoldArgs`, let go at its death):
        a restart reads them again, and the actor registers with no owner for them."""
        rec = self.track(spec.actor_id, spec.class_name, max_task_retries, subscribe=False)
        if top_refs or nested:
            self.client.objects.handle(HoldArgs(spec.actor_id, tuple(
                r.id for r in (*top_refs, *nested))))
        if not top_refs:
            self.client.loop.send_threadsafe(self.client.node_address, spec)
            return
        rec.ctor_refs = list(top_refs)
        self.client.loop.call_soon(self._resolve_then_create, spec, rec.ctor_refs)

    def _resolve_then_create(self, spec: m.CreateActor, top_refs: list[Any]) -> None:
        resolved: list[m.Value | None] = [None] * len(top_refs)
        left = [len(top_refs)]

        def on_ready(i: int, value: m.Value) -> None:
            resolved[i] = value
            left[0] -= 1
            if left[0] == 0:
                args = m.Args(data=spec.args.data, refs=resolved)  # type: ignore[arg-type]
                self.client.loop.call_soon(self.client.loop.send, self.client.node_address,
                                           msgspec.structs.replace(spec, args=args))

        self.client._request_borrowed(top_refs)
        for i, ref in enumerate(top_refs):
            if not self.client.objects.when_ready(ref.id, _bind(on_ready, i)):
                on_ready(i, values.encode_error(ValueError(f"argument {ref!r} is unknown")))

    def call(self, rec: ActorRecord, method: str, data: bytes, top_refs: list[Any],
             nested_ids: list[bytes], num_returns: int, task_id: bytes | None = None,
             backpressure: int = 0, group: str = "", retries: int | None = None,
             retry_exceptions: Any = False) -> bytes:
        """Submit a call; returns its task id (return object ids derive from it). Make the
        return refs first (pass their `task_id`): a call that fails at once sets their values.

        A call with ref arguments takes its place in the actor's order now and is sent once
        they resolve; a threaded or async actor's such call is numbered only then, so that
        calls made after it with ready arguments run first, as in Ray.

        `retries` overrides the actor's max_task_retries for this call; with
        `retry_exceptions` an exception it covers sends the call again, as the last of the
        caller's calls so far, while retries are left (one budget with restarts, as Ray's)."""
        client = self.client
        task_id = task_id or client.ids.task_id()
        release = [r.id for r in top_refs] + nested_ids if top_refs or nested_ids else _NO_IDS
        if release:
            client.objects.add_submitted(release)
        args = m.Args(data=data) if data else _NO_ARGS
        call = Call(rec, task_id, method, args, num_returns, release, backpressure, group,
                    client.current_task_id or b"", retries, retry_exceptions)
        self.calls[task_id] = call
        if not top_refs:
            with self._lock:
                sent = self.core.submit_fast(rec.actor_id, task_id, retries)
            if sent is None:  # not alive (yet): the core queues it, or fails it
                self._carry(self._handle(Submit(rec.actor_id, task_id, True, retries)),
                            on_loop=False)
            else:  # the common case: straight to the worker from this thread
                msg = self._message(call, sent[1])
                self.resends.sent(sent[0], msg)
                client.send_direct(sent[0], msg)
            return task_id
        ordered = not rec.unordered
        if ordered:
            self._carry(self._handle(Submit(rec.actor_id, task_id, False, retries)),
                        on_loop=False)
        else:
            with self._lock:
                rec.resolving += 1
        client.loop.call_soon(self._resolve_then_send, call, data, top_refs, ordered)
        return task_id

    def pending(self, rec: ActorRecord) -> int:
        """Calls made on the actor here and not yet answered (max_pending_calls counts them)."""
        return self.core.open_calls(rec.actor_id) + rec.resolving

    def pending_reason(self, task_id: bytes) -> str:
        """Why a call waits on an actor that no node can place yet (the node's warning), or ''."""
        call = self.calls.get(task_id)
        if call is not None and self.core.state(call.rec.actor_id) is State.PENDING:
            return self.pending_reasons.get(f"actor {call.rec.class_name}", "")
        return ""

    def has_call(self, task_id: bytes) -> bool:
        """True if `task_id` is an unfinished call to an actor made here."""
        return task_id in self.calls

    def cancel_children(self, parent: bytes) -> None:
        """Cancel the unfinished actor calls task `parent` made (Ray's recursive cancel
        covers actor tasks too; loop thread)."""
        for call in [c for c in list(self.calls.values()) if c.parent == parent]:
            self.cancel(call.task_id, recursive=True)

    def cancel(self, task_id: bytes, recursive: bool) -> None:
        """Ray's actor-task cancel (loop thread): a call not sent yet fails now with
        TaskCancelledError; a sent one is cancelled by the actor's worker if it has not
        started (or, in an async actor, is running)."""
        call = self.calls.get(task_id)
        if call is None:
            return
        with self._lock:
            sent = self.core.in_flight(call.rec.actor_id, task_id)
        if not sent:
            # it still goes, keeping its place in the actor's sequence, and the worker
            # answers it with TaskCancelledError without running it
            call.method = CANCELLED_CALL
        elif call.rec.address:
            self.client.loop.send(call.rec.address, m.CancelTask(task_id=task_id,
                                                                 recursive=recursive))

    def kill_requested(self, actor_id: bytes, no_restart: bool) -> None:
        """This caller asked the node to kill the actor: from now on no call is sent to the
        worker being killed (they queue, then fail or go to the next incarnation)."""
        with self._lock:
            rec = self.records.get(actor_id)
            if rec is None:
                return
            if no_restart:
                rec.killing = True
            elif self.core.state(actor_id) is State.ALIVE:
                rec.killed_incarnation = rec.incarnation
            self.core.handle(Hold(actor_id))
        if no_restart:
            self.client.loop.call_soon(self.killed, actor_id)

    # -- loop thread -----------------------------------------------------------------------
    def out_of_scope(self, actor_id: bytes) -> None:
        """No handle to this (non-detached) actor is left anywhere: it exits once the calls
        made on it complete, freeing its resources and name (Ray's handle counting)."""
        rec = self.records.get(actor_id)
        if rec is not None and self.pending(rec):
            rec.out_of_scope = True
            return
        self._end(actor_id)

    def _end(self, actor_id: bytes) -> None:
        self.client.loop.send(self.client.node_address, m.KillActor(
            actor_id=actor_id, no_restart=True,
            reason="all references to it were dropped (out of scope)"))

    def _settled(self, rec: ActorRecord) -> None:
        if rec.out_of_scope and not self.pending(rec):
            rec.out_of_scope = False
            self._end(rec.actor_id)

    def killed(self, actor_id: bytes) -> None:
        """This caller killed the actor (no restart): fail its calls now, not when the node
        reports the death, so that a call made after `kill` never reaches the old worker."""
        rec = self.records.get(actor_id)
        if rec is None or self.core.state(actor_id) is State.DEAD:
            return
        self._on_state("", m.ActorState(actor_id=actor_id, state="dead",
                                        reason="it was killed by zmesh.kill()"), [])

    def _resolve_then_send(self, call: Call, data: bytes, top_refs: list[Any],
                           ordered: bool) -> None:
        resolved: list[m.Value | None] = [None] * len(top_refs)
        left = [len(top_refs)]
        aid = call.rec.actor_id

        def on_ready(i: int, value: m.Value) -> None:
            resolved[i] = value
            left[0] -= 1
            if left[0] == 0:
                call.args = m.Args(data=data, refs=resolved)  # type: ignore[arg-type]
                call.pushes = tensor_push.scan(resolved)
                if ordered:
                    event: Event = Ready(aid, call.task_id)
                else:
                    with self._lock:
                        call.rec.resolving -= 1
                    event = Submit(aid, call.task_id, True, call.retries)
                self.client.loop.call_soon(lambda: self._carry(self._handle(event)))

        self.client._request_borrowed(top_refs)
        for i, ref in enumerate(top_refs):
            if not self.client.objects.when_ready(ref.id, _bind(on_ready, i)):
                on_ready(i, values.encode_error(ValueError(f"argument {ref!r} is unknown")))

    def _on_state(self, sender: str, msg: m.ActorState, bufs: list[Any]) -> None:
        rec = self.records.get(msg.actor_id)
        state = self.core.state(msg.actor_id)
        if rec is None or state is State.DEAD:  # death is final; later news is stale
            return
        if msg.state == "alive" and (rec.killing or msg.restarts == rec.killed_incarnation):
            return  # the incarnation this caller is killing
        if msg.class_name:
            rec.class_name = msg.class_name
        if msg.state in ("dead", "restarting") and rec.address:
            # its worker is gone, and with it whatever it borrowed from us
            asks = self.client.objects.handle(BorrowerGone(rec.address))
            if asks:  # (the owner asks the callers of lends it made to settle them)
                self.client.lending.carry(asks)
        event: Event
        if msg.state == "alive":
            rec.incarnation = msg.restarts
            rec.address = msg.address
            self._by_address[msg.address] = rec
            if msg.call_address:
                self._worker_of[msg.call_address] = msg.address
            # calls go where its worker takes them (a sync actor's executor may have an
            # endpoint of its own); everything else (cancels, borrows) to its address
            event = ActorAlive(msg.actor_id, msg.restarts, msg.call_address or msg.address)
        elif msg.state == "dead":
            rec.error = self._death_value(rec, msg)
            # dead for good: what its constructor's arguments held goes (no restart reads
            # them; a worker still running is being killed, its answers count for nothing)
            rec.ctor_refs = []
            freed = self.client.objects.handle(ReleaseArgs(msg.actor_id))
            if freed:
                self.client.lending.carry(freed)
            if self.core.open_calls(msg.actor_id):
                # Answers its worker sent before it died may still be on their way: they come
                # on the worker's connection, this news on the node's, and neither order nor
                # the ROUTER's fair queueing puts them first (a graceful exit's queued calls
                # failed with ActorDiedError though they ran). Calls still out then fail.
                # Meanwhile the actor counts as being killed: an "alive" that comes in this
                # grace (this caller's kill still on its way to the actor's node) must not
                # send the queued calls to the worker being killed.
                rec.killing = True
                dead = ActorDead(msg.actor_id, msg.reason)
                self.client.loop.call_later(DEATH_GRACE_S,
                                            lambda: self._carry(self._handle(dead)))
                return
            rec.killing = False
            event = ActorDead(msg.actor_id, msg.reason)
        elif msg.state == "restarting":
            event = ActorRestarting(msg.actor_id, msg.reason)
        else:
            return
        self._carry(self._handle(event))

    def _unavailable_value(self, rec: ActorRecord, reason: str, call: Call) -> m.Value:
        return values.encode_error(ActorUnavailableError(
            f"actor {rec.class_name!r} ({rec.actor_id.hex()[:12]}) is restarting: {reason}; "
            f"the call to {call.method!r} was in flight and is not retried "
            f"(max_task_retries={rec.max_task_retries})"))

    def _death_value(self, rec: ActorRecord, msg: m.ActorState) -> m.Value:
        cause = None
        if msg.error:
            try:
                cause = values.decode(m.Value(data=msg.error, is_error=True), None)
            except Exception:
                cause = None
        text = f"actor {rec.class_name!r} ({rec.actor_id.hex()[:12]}) died: {msg.reason}"
        if isinstance(cause, TaskError):  # __init__ raised: calls re-raise the user's error
            return values.encode_error(ActorInitError(text, cause.function_name,
                                                      cause.traceback_str, cause.cause, cause.pid))
        err = ActorDiedError(text)
        err.cause = cause  # type: ignore[attr-defined]
        return values.encode_error(err)

    def on_result(self, sender: str, msg: m.TaskResult) -> None:
        call = self.calls.get(msg.task_id)
        if call is None or sender not in self._by_address or msg.attempt != call.attempt:
            return  # (an answer of an earlier attempt, late: the call went again meanwhile)
        # Without the lock: Completed touches only this call's entries, which no user
        # thread's event touches (a call is answered only once it was sent), and every
        # other loop-thread event runs on this thread. A user thread holding the lock when
        # the GIL switches would otherwise stall the loop for a switch interval (5 ms).
        # (what restarts left of its retries, read before the answer closes the call)
        left = self.core.retries_left(call.rec.actor_id, msg.task_id) \
            if call.retry_exceptions else None
        if not self.core.complete_fast(call.rec.actor_id, msg.task_id):
            return  # not in flight: an answer from a worker the call no longer waits on
        if left is not None and self._retry(call, sender, msg, left):
            return
        del self.calls[msg.task_id]
        self.resends.answered(msg.task_id)
        if msg.borrowed:
            self.client.objects.add_borrower(msg.borrowed, sender)
        self._complete(call, msg.returns)
        if call.rec.out_of_scope:
            self._settled(call.rec)
        if msg.contained:
            self.client.hold_returned(sender, [IdGen.object_id(call.task_id, i) for i in
                                               range(max(call.num_returns, 1))], msg.contained)

    def _retry(self, call: Call, sender: str, msg: m.TaskResult, left: int) -> bool:
        """Send again a call whose exception its `retry_exceptions` covers, while retries
        are left (`left`: the core's count, which restarts that sent it again spent too, as
        Ray's one max_task_retries budget; loop thread): True when it went again."""
        rec = call.rec
        if left == 0 or rec.killing or not covered(call.retry_exceptions, msg.returns):
            return False
        if msg.contained:
            # nothing keeps this answer: we borrow none of the actor's own refs in it
            # (unsaid, it would count us as their borrower for good); said before the call
            # goes again, whose answer may lend us some of them again
            self.client.hold_returned(sender, [], msg.contained)
        call.retries = left - 1 if left > 0 else left
        call.attempt += 1  # an answer of this attempt that comes late is not the next one's
        self.resends.answered(msg.task_id)
        self._carry(self._handle(Submit(rec.actor_id, call.task_id, True, call.retries)))
        return True

    def _complete(self, call: Call, returns: list[m.Value]) -> None:
        objects = self.client.objects
        n = call.num_returns
        for i in range(n) if n > 1 else _ONE:  # (one return, the common case: no range made)
            value = returns[i] if i < len(returns) else returns[0]
            oid = IdGen.object_id(call.task_id, i)
            if objects.set_value(oid, value) is None and value.loc is not None:
                self.client.loop.send(self.client.node_address, m.FreeObjects(
                    object_ids=[oid], node=value.loc.node))
        if call.release:
            objects.remove_submitted(call.release)


def _bind(fn: Any, index: int) -> Any:
    return lambda value: fn(index, value)
