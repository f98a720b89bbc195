"""Calling actors: per-caller sequence numbers, calls sent straight to the actor's worker.

The caller queues calls until the actor's address is known, learns of restarts and death
from its node (ActorState), retries in-flight calls up to max_task_retries after a restart,
and fails the rest with ActorDiedError saying why.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec

from zmesh.core.ownership import BorrowerGone
from zmesh.errors import ActorDiedError, ActorUnavailableError
from zmesh.protocol.messages import runtime as m
from zmesh.runtime import values
from zmesh.runtime.ids import IdGen
from zmesh.runtime.loop import EventLoop
from zmesh.task_error import ActorInitError, TaskError

if TYPE_CHECKING:
    from zmesh.runtime.owner.client import CoreClient


CANCELLED_CALL = "__zmesh_cancelled__"
"""The method name a call cancelled before it was sent goes with."""


@dataclass(eq=False)
class Call:
    msg: m.ActorCall
    release: list[bytes]
    retries_left: int


@dataclass(eq=False)
class ActorRecord:
    """What a caller knows of one actor."""

    actor_id: bytes
    class_name: str
    state: str = "pending"
    address: str = ""
    error: m.Value | None = None
    seq: int = 0
    max_task_retries: int = 0
    queue: deque[Call] = field(default_factory=deque)
    inflight: dict[bytes, Call] = field(default_factory=dict)
    # A restarted actor's mailbox expects each caller's calls from seq 0 again, so calls
    # keep their submission seq and are renumbered densely for each new incarnation.
    pending: set[int] = field(default_factory=set)  # seqs submitted and not yet completed
    incarnation: int = -1  # the restart count our wire seqs are numbered for
    renumbered: dict[int, int] = field(default_factory=dict)
    seq_cut: int = 0  # seqs from here on map to seq - seq_cut + seq_base
    seq_base: int = 0
    hold: bool = False  # this caller is killing the actor: send nothing from user threads
    out_of_scope: bool = False  # its last handle went: it ends once our calls complete
    ctor_refs: list[Any] = field(default_factory=list)  # constructor ref arguments, held
    unordered: bool = False  # threaded or async: calls need not run in submission order
    killed_incarnation: int = -1  # an "alive" for it is stale news

    def wire(self, msg: m.ActorCall) -> m.ActorCall:
        """The call as the current incarnation must see it."""
        seq = msg.seq
        wire = seq - self.seq_cut + self.seq_base if seq >= self.seq_cut else self.renumbered[seq]
        return msg if wire == seq else msgspec.structs.replace(msg, seq=wire)


class ActorCaller:
    """Caller-side actor state; `call`/`create`/`track` run on user threads, the rest on the loop."""

    def __init__(self, client: CoreClient) -> None:
        self.client = client
        self.records: dict[bytes, ActorRecord] = {}
        self._by_address: dict[str, ActorRecord] = {}
        self._lock = threading.Lock()
        self.pending_reasons: dict[str, str] = {}
        self.lives: dict[bytes, bytes] = {}  # handle-count id -> actor id (actors we created)

    def register(self, loop: EventLoop) -> None:
        loop.on(m.ActorState, self._on_state)

    # -- user threads ----------------------------------------------------------------------
    def track(self, actor_id: bytes, class_name: str, max_task_retries: int = 0,
              subscribe: bool = True) -> ActorRecord:
        """The record for an actor, subscribing to its state the first time it is seen."""
        with self._lock:
            rec = self.records.get(actor_id)
            if rec is not None:
                return rec
            rec = self.records[actor_id] = ActorRecord(actor_id, class_name,
                                                       max_task_retries=max_task_retries)
        if subscribe:
            self.client.loop.send_threadsafe(self.client.node_address, m.SubscribeActor(
                actor_id=actor_id, subscriber=self.client.address))
        return rec

    def create(self, spec: m.CreateActor, max_task_retries: int,
               top_refs: Sequence[Any] = ()) -> None:
        """Start an actor; with `top_refs` (ref arguments of the constructor), once they are
        ready, their values going with the spec (the refs stay held by the record)."""
        rec = self.track(spec.actor_id, spec.class_name, max_task_retries, subscribe=False)
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
             backpressure: int = 0, group: str = "") -> bytes:
        """Queue a call; returns its task id (return object ids derive from it). Make the
        return refs first (pass their `task_id`): a call that fails at once sets their values."""
        client = self.client
        task_id = task_id or client.ids.task_id()
        seq = -1
        if not (top_refs and rec.unordered):
            seq = self._next_seq(rec)
        release = [r.id for r in top_refs] + nested_ids
        if release:
            client.objects.add_submitted(release)
        if top_refs:
            client.loop.call_soon(self._resolve_then_send, rec, task_id, seq, method, data,
                                  top_refs, release, num_returns, backpressure, group)
        else:
            msg = m.ActorCall(actor_id=rec.actor_id, caller=client.address, seq=seq,
                              task_id=task_id, method=method, args=m.Args(data=data),
                              num_returns=num_returns, backpressure=backpressure,
                              concurrency_group=group)
            call = Call(msg, release, rec.max_task_retries)
            if rec.state == "alive" and not rec.queue and not rec.hold:
                rec.inflight[task_id] = call
                if rec.state == "alive":  # re-check: a death seen now will see this call
                    client.send_direct(rec.address, rec.wire(msg))
                    return task_id
                rec.inflight.pop(task_id, None)
            client.loop.call_soon(self._dispatch, rec, call)
        return task_id

    def pending_reason(self, task_id: bytes) -> str:
        """Why a call waits on an actor that no node can place yet (the node's warning), or ''."""
        for rec in list(self.records.values()):
            if rec.state == "pending" and (task_id in rec.inflight or any(
                    c.msg.task_id == task_id for c in list(rec.queue))):
                return self.pending_reasons.get(f"actor {rec.class_name}", "")
        return ""

    def has_call(self, task_id: bytes) -> bool:
        """True if `task_id` is an unfinished call to an actor made here."""
        for rec in list(self.records.values()):
            if task_id in rec.inflight or any(c.msg.task_id == task_id for c in list(rec.queue)):
                return True
        return False

    def cancel(self, task_id: bytes, recursive: bool) -> None:
        """Ray's actor-task cancel (loop thread): a call not sent yet fails now with
        TaskCancelledError; a sent one is cancelled by the actor's worker if it has not
        started (or, in an async actor, is running)."""
        for rec in list(self.records.values()):
            for call in list(rec.queue):
                if call.msg.task_id == task_id:
                    # it still goes, keeping its place in the actor's sequence, and the
                    # worker answers it with TaskCancelledError without running it
                    call.msg = msgspec.structs.replace(call.msg, method=CANCELLED_CALL)
                    return
            if task_id in rec.inflight and rec.address:
                self.client.loop.send(rec.address, m.CancelTask(task_id=task_id,
                                                                recursive=recursive))
                return

    def kill_requested(self, actor_id: bytes, no_restart: bool) -> None:
        """This caller asked the node to kill the actor: later calls go through the loop,
        behind the kill, so none reaches the worker being killed."""
        rec = self.records.get(actor_id)
        if rec is None:
            return
        rec.hold = True
        self.client.loop.call_soon(self.killed if no_restart else self._restarting, actor_id)

    # -- loop thread -----------------------------------------------------------------------
    def out_of_scope(self, actor_id: bytes) -> None:
        """No handle to this (non-detached) actor is left anywhere: it exits once the calls
        made on it complete, freeing its resources and name (Ray's handle counting)."""
        rec = self.records.get(actor_id)
        if rec is not None and rec.pending:
            rec.out_of_scope = True
            return
        self._end(actor_id)

    def _end(self, actor_id: bytes) -> None:
        self.client.loop.send(self.client.node_address, m.KillActor(actor_id=actor_id,
                                                                    no_restart=True))

    def _settled(self, rec: ActorRecord) -> None:
        if rec.out_of_scope and not rec.pending:
            rec.out_of_scope = False
            self._end(rec.actor_id)

    def _restarting(self, actor_id: bytes) -> None:
        rec = self.records.get(actor_id)
        if rec is None or rec.state != "alive":
            if rec is not None:
                rec.hold = False
            return
        rec.state = "restarting"  # queue calls for the next incarnation
        rec.killed_incarnation = rec.incarnation

    def killed(self, actor_id: bytes) -> None:
        """This caller killed the actor (no restart): fail its calls now, not when the node
        reports the death, so that a call made after `kill` never reaches the old worker."""
        rec = self.records.get(actor_id)
        if rec is None or rec.state == "dead":
            return
        self._on_state("", m.ActorState(actor_id=actor_id, state="dead",
                                        reason="it was killed by zmesh.kill()"), [])

    def _next_seq(self, rec: ActorRecord) -> int:
        with self._lock:
            seq = rec.seq
            rec.seq += 1
            rec.pending.add(seq)
        return seq

    def _resolve_then_send(self, rec: ActorRecord, task_id: bytes, seq: int, method: str,
                           data: bytes, top_refs: list[Any], release: list[bytes],
                           num_returns: int, backpressure: int = 0, group: str = "") -> None:
        resolved: list[m.Value | None] = [None] * len(top_refs)
        left = [len(top_refs)]
        # the call keeps its seq: calls behind it wait in the actor's mailbox until it lands;
        # a threaded or async actor's call (seq -1) is numbered once its arguments are ready,
        # so that calls made after it with ready arguments run first, as in Ray

        def on_ready(i: int, value: m.Value) -> None:
            resolved[i] = value
            left[0] -= 1
            if left[0] == 0:
                wire_seq = seq if seq >= 0 else self._next_seq(rec)
                msg = m.ActorCall(actor_id=rec.actor_id, caller=self.client.address,
                                  seq=wire_seq,
                                  task_id=task_id, method=method,
                                  args=m.Args(data=data, refs=resolved),  # type: ignore[arg-type]
                                  num_returns=num_returns, backpressure=backpressure,
                                  concurrency_group=group)
                self.client.loop.call_soon(self._dispatch, rec,
                                           Call(msg, release, rec.max_task_retries))

        self.client._request_borrowed(top_refs)
        for i, ref in enumerate(top_refs):
            if not self.client.objects.when_ready(ref.id, _bind(on_ready, i)):
                on_ready(i, values.encode_error(ValueError(f"argument {ref!r} is unknown")))

    def _dispatch(self, rec: ActorRecord, call: Call) -> None:
        if rec.state == "alive":
            rec.inflight[call.msg.task_id] = call
            if not self.client.loop.send(rec.address, rec.wire(call.msg)):
                rec.inflight.pop(call.msg.task_id, None)
                rec.queue.append(call)
        elif rec.state == "dead":
            self._fail(rec, call)
        else:
            rec.queue.append(call)

    def _on_state(self, sender: str, msg: m.ActorState, bufs: list[Any]) -> None:
        rec = self.records.get(msg.actor_id)
        if rec is None or rec.state == "dead":  # death is final; later news is stale
            return
        if msg.state == "alive" and msg.restarts == rec.killed_incarnation:
            return  # the incarnation this caller is killing
        rec.hold = False
        if msg.class_name:
            rec.class_name = msg.class_name
        if msg.state in ("dead", "restarting") and rec.address:
            # its worker is gone, and with it whatever it borrowed from us
            self.client.objects.handle(BorrowerGone(rec.address))
        if msg.state == "alive":  # address and numbering first: user threads send on "alive"
            if rec.incarnation >= 0 and msg.restarts != rec.incarnation:
                self._renumber(rec)
            rec.incarnation = msg.restarts
            rec.address = msg.address
            self._by_address[msg.address] = rec
        rec.state = msg.state
        if msg.state == "alive":
            queued = sorted(rec.queue, key=lambda c: c.msg.seq)
            rec.queue.clear()
            for call in queued:
                self._dispatch(rec, call)
        elif msg.state == "dead":
            rec.error = self._death_value(rec, msg)
            for call in list(rec.inflight.values()) + list(rec.queue):
                self._fail(rec, call)
            rec.inflight.clear()
            rec.queue.clear()
        elif msg.state == "restarting":
            for call in list(rec.inflight.values()):
                if call.retries_left != 0:
                    call.retries_left -= 1
                    rec.queue.append(call)
                else:
                    self._fail(rec, call, self._unavailable_value(rec, msg, call))
            rec.inflight.clear()

    def _renumber(self, rec: ActorRecord) -> None:
        """Number the calls still to run densely from 0 for a new incarnation."""
        with self._lock:
            rec.renumbered = {seq: i for i, seq in enumerate(sorted(rec.pending))}
            rec.seq_base = len(rec.renumbered)
            rec.seq_cut = rec.seq

    def _unavailable_value(self, rec: ActorRecord, msg: m.ActorState, call: Call) -> m.Value:
        return values.encode_error(ActorUnavailableError(
            f"actor {rec.class_name!r} ({rec.actor_id.hex()[:12]}) is restarting: {msg.reason}; "
            f"the call to {call.msg.method!r} was in flight and is not retried "
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

    def _fail(self, rec: ActorRecord, call: Call, error: m.Value | None = None) -> None:
        value = error or rec.error or values.encode_error(
            ActorDiedError(f"actor {rec.class_name!r} is dead"))
        rec.pending.discard(call.msg.seq)
        self._complete(call, [value] * max(call.msg.num_returns, 1))
        self._settled(rec)

    def on_result(self, sender: str, msg: m.TaskResult) -> None:
        rec = self._by_address.get(sender)
        call = None if rec is None else rec.inflight.pop(msg.task_id, None)
        if call is None:
            return
        rec.pending.discard(call.msg.seq)  # type: ignore[union-attr]
        if msg.borrowed:
            self.client.objects.add_borrower(msg.borrowed, sender)
        self._complete(call, msg.returns)
        self._settled(rec)  # type: ignore[arg-type]
        if msg.contained:
            self.client.hold_returned(sender, [IdGen.object_id(call.msg.task_id, i) for i in
                                               range(max(call.msg.num_returns, 1))], msg.contained)

    def _complete(self, call: Call, returns: list[m.Value]) -> None:
        objects = self.client.objects
        for i in range(max(call.msg.num_returns, 1)):
            value = returns[i] if i < len(returns) else returns[0]
            oid = IdGen.object_id(call.msg.task_id, i)
            if objects.set_value(oid, value) is None and value.loc is not None:
                self.client.loop.send(self.client.node_address, m.FreeObjects(
                    object_ids=[oid], node=value.loc.node))
        if call.release:
            objects.remove_submitted(call.release)


def _bind(fn: Any, index: int) -> Any:
    return lambda value: fn(index, value)
