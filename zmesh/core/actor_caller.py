"""The caller's side of actor ordering as a pure state machine: sequence numbers across
incarnations, what is sent, queued, retried or failed.

An actor's mailbox releases each caller's calls in sequence order from 0, and a restarted
actor starts a fresh mailbox. So the caller numbers its calls once (submission order) and,
for every new incarnation, maps the calls still to run densely onto 0, 1, 2, …: no gap that
would stall the new mailbox, no reordering. Calls in flight when the actor restarts are
retried (up to `max_task_retries`) or fail as unavailable; a dead actor fails them all.
No I/O: the shell (`runtime/owner/actor_calls.py`) feeds events and carries out actions.
"""

from __future__ import annotations

from collections import deque
from enum import Enum
from typing import Any

import msgspec

__all__ = [
    "Action", "ActorAlive", "ActorCallerCore", "ActorDead", "ActorRestarting", "Completed",
    "Done", "Event", "Fail", "Hold", "Ready", "Send", "SendFailed", "State", "Submit", "Track",
]


class State(Enum):
    PENDING = "pending"
    ALIVE = "alive"
    RESTARTING = "restarting"
    DEAD = "dead"


# -- events ---------------------------------------------------------------------------------
class Track(msgspec.Struct):
    """This caller learned of an actor (created it, or got a handle)."""

    actor_id: bytes
    max_task_retries: int = 0


class Submit(msgspec.Struct):
    """A call was made; it takes the next sequence number. `ready` False: its arguments are
    still resolving (it holds its place, and is sent once `Ready` comes). `max_task_retries`
    (None: the actor's) is how often a restart may send it again (-1: always)."""

    actor_id: bytes
    task_id: bytes
    ready: bool = True
    max_task_retries: int | None = None


class Ready(msgspec.Struct):
    """The arguments of a submitted call are resolved: it may be sent."""

    actor_id: bytes
    task_id: bytes


class ActorAlive(msgspec.Struct):
    """Incarnation `incarnation` (the restart count) of the actor runs at `address`."""

    actor_id: bytes
    incarnation: int
    address: str


class ActorRestarting(msgspec.Struct):
    actor_id: bytes
    reason: str


class ActorDead(msgspec.Struct):
    actor_id: bytes
    reason: str


class Completed(msgspec.Struct):
    """The actor answered the call."""

    actor_id: bytes
    task_id: bytes


class SendFailed(msgspec.Struct):
    """The call could not be sent (no route to the address): it waits, with every later call,
    for the next word of where the actor runs (the shell asks for it)."""

    actor_id: bytes
    task_id: bytes


class Hold(msgspec.Struct):
    """This caller is killing (or restarting) the actor: send nothing more to the worker;
    calls in flight stay in flight until the node says what became of it."""

    actor_id: bytes


Event = (Track | Submit | Ready | ActorAlive | ActorRestarting | ActorDead | Completed
         | SendFailed | Hold)


# -- actions --------------------------------------------------------------------------------
class Send(msgspec.Struct):
    """Send the call to the actor's worker with this (incarnation's) sequence number."""

    actor_id: bytes
    task_id: bytes
    address: str
    seq: int


class Fail(msgspec.Struct):
    """The call will not run: `unavailable` (restarting, no retries left) or died."""

    actor_id: bytes
    task_id: bytes
    unavailable: bool
    reason: str


class Done(msgspec.Struct):
    """The actor's answer to an in-flight call is accepted: hand its results over."""

    actor_id: bytes
    task_id: bytes


Action = Send | Fail | Done


class _Call(msgspec.Struct, gc=False):  # (atomic fields: no cycle, so not tracked)
    task_id: bytes
    seq: int  # submission order, never changes
    retries_left: int
    ready: bool


class _Actor(msgspec.Struct):
    max_task_retries: int
    state: State = State.PENDING
    incarnation: int = -1
    address: str = ""
    next_seq: int = 0
    calls: dict[bytes, _Call] = msgspec.field(default_factory=dict)  # submitted, not completed
    inflight: set[bytes] = msgspec.field(default_factory=set)
    queue: set[bytes] = msgspec.field(default_factory=set)  # ready, waiting to be sent
    renumbered: dict[int, int] = msgspec.field(default_factory=dict)
    seq_cut: int = 0
    seq_base: int = 0

    def wire(self, seq: int) -> int:
        return seq - self.seq_cut + self.seq_base if seq >= self.seq_cut else \
            self.renumbered[seq]


class ActorCallerCore:
    """Every actor one caller talks to; `handle(event) -> actions`.

    On every actor call's path (a `Submit` and a `Completed` each): those two cases come
    first, events are mutable Structs, and
    the log keeps the actions list as returned."""

    def __init__(self, log_size: int = 10_000) -> None:
        self.actors: dict[bytes, _Actor] = {}
        # (event, actions); the fast paths log (event name, *fields), expanded by story(): all
        # atomic, so the collector stops tracking them (a class in them kept 10,000 tracked)
        self.log: deque[tuple[Any, ...]] = deque(maxlen=log_size)

    def handle(self, event: Event) -> list[Action]:
        """Apply one event; return what the shell must do."""
        out: list[Action] = []
        a: _Actor | None
        call: _Call | None
        match event:
            case Submit(aid, tid, ready, retries):
                a = self._actor(aid)
                call = _Call(tid, a.next_seq, a.max_task_retries if retries is None else retries,
                             ready)
                a.next_seq += 1
                if a.state is State.DEAD:
                    out.append(Fail(aid, tid, False, "the actor is dead"))
                else:
                    a.calls[tid] = call
                    if ready and a.state is State.ALIVE:  # the common case, inlined
                        a.inflight.add(tid)
                        out.append(Send(aid, tid, a.address, call.seq - a.seq_cut + a.seq_base))
                    elif ready:
                        a.queue.add(tid)
            case Completed(aid, tid):
                a = self.actors.get(aid)
                if a is not None and tid in a.inflight:
                    a.inflight.discard(tid)
                    del a.calls[tid]
                    out.append(Done(aid, tid))
            case Track(aid, retries):
                if aid not in self.actors:
                    self.actors[aid] = _Actor(retries)
            case Ready(aid, tid):
                a = self.actors.get(aid)
                call = None if a is None else a.calls.get(tid)
                if a is not None and call is not None and not call.ready:
                    call.ready = True
                    self._offer(aid, a, call, out)
            case ActorAlive(aid, incarnation, address):
                a = self._actor(aid)
                if a.state is not State.DEAD:
                    if a.incarnation >= 0 and incarnation != a.incarnation:
                        self._renumber(a)
                    a.incarnation, a.address, a.state = incarnation, address, State.ALIVE
                    for tid in _by_seq(a.queue, a.calls):
                        self._send(aid, a, a.calls[tid], out)
                    a.queue.clear()
            case ActorRestarting(aid, reason):
                a = self.actors.get(aid)
                if a is not None and a.state is not State.DEAD:
                    a.state = State.RESTARTING
                    for tid in _by_seq(a.inflight, a.calls):
                        call = a.calls[tid]
                        if call.retries_left != 0:
                            call.retries_left -= 1
                            a.queue.add(tid)
                        else:
                            del a.calls[tid]
                            out.append(Fail(aid, tid, True, reason))
                    a.inflight.clear()
            case ActorDead(aid, reason):
                a = self._actor(aid)
                if a.state is not State.DEAD:
                    a.state = State.DEAD
                    for tid in _by_seq(a.calls, a.calls):
                        out.append(Fail(aid, tid, False, reason))
                    a.calls.clear()
                    a.inflight.clear()
                    a.queue.clear()
            case SendFailed(aid, tid):
                a = self.actors.get(aid)
                if a is not None and tid in a.inflight:
                    a.inflight.discard(tid)
                    a.queue.add(tid)
                    if a.state is State.ALIVE:
                        a.state = State.PENDING
            case Hold(aid):
                a = self.actors.get(aid)
                if a is not None and a.state is State.ALIVE:
                    a.state = State.RESTARTING
            case _:
                raise TypeError(f"not an actor caller event: {event!r}")
        self.log.append((event, out))  # the shell only reads `out`
        return out

    # -- fast paths: the same rules as handle(Submit) / handle(Completed) for the common --
    # -- case, with no event or action objects: every actor call comes through both -------
    def submit_fast(self, aid: bytes, tid: bytes,
                    retries: int | None = None) -> tuple[str, int] | None:
        """`handle(Submit(aid, tid, True, retries))` when the actor is alive: returns the
        Send's (address, sequence number). None, changing nothing, when it is not: call
        `handle` then."""
        a = self.actors.get(aid)
        if a is None or a.state is not State.ALIVE:
            return None
        seq = a.next_seq
        a.next_seq = seq + 1
        a.calls[tid] = _Call(tid, seq, a.max_task_retries if retries is None else retries, True)
        a.inflight.add(tid)
        wire = seq - a.seq_cut + a.seq_base
        self.log.append(("Submit", aid, tid, a.address, wire))
        return a.address, wire

    def complete_fast(self, aid: bytes, tid: bytes) -> bool:
        """`handle(Completed(aid, tid))`: True when the answer is accepted (the Done)."""
        a = self.actors.get(aid)
        if a is None or tid not in a.inflight:
            self.log.append(("Completed", aid, tid))
            return False
        a.inflight.discard(tid)
        del a.calls[tid]
        self.log.append(("Completed", aid, tid, True))
        return True

    def _actor(self, aid: bytes) -> _Actor:
        a = self.actors.get(aid)  # (not setdefault: that would build an _Actor every call)
        if a is None:
            a = self.actors[aid] = _Actor(0)
        return a

    def _offer(self, aid: bytes, a: _Actor, call: _Call, out: list[Action]) -> None:
        if a.state is State.ALIVE:
            self._send(aid, a, call, out)
        else:
            a.queue.add(call.task_id)

    def _send(self, aid: bytes, a: _Actor, call: _Call, out: list[Action]) -> None:
        a.inflight.add(call.task_id)
        out.append(Send(aid, call.task_id, a.address, a.wire(call.seq)))

    @staticmethod
    def _renumber(a: _Actor) -> None:
        """Number the calls still to run densely from 0 for a new incarnation."""
        a.renumbered = {seq: i for i, seq in enumerate(sorted(c.seq for c in a.calls.values()))}
        a.seq_base = len(a.renumbered)
        a.seq_cut = a.next_seq

    # -- queries (the shell's) -------------------------------------------------------------
    def retries_left(self, actor_id: bytes, task_id: bytes) -> int | None:
        """How often the open call may still go again (restarts took their share; -1:
        always); None: not an open call."""
        a = self.actors.get(actor_id)
        call = a.calls.get(task_id) if a is not None else None
        return None if call is None else call.retries_left

    def open_calls(self, actor_id: bytes) -> int:
        """Calls submitted to the actor and not yet answered or failed."""
        a = self.actors.get(actor_id)
        return 0 if a is None else len(a.calls)

    def in_flight(self, actor_id: bytes, task_id: bytes) -> bool | None:
        """True: sent; False: submitted, not sent yet; None: not an open call."""
        a = self.actors.get(actor_id)
        if a is None or task_id not in a.calls:
            return None
        return task_id in a.inflight

    def state(self, actor_id: bytes) -> State | None:
        a = self.actors.get(actor_id)
        return None if a is None else a.state

    # -- checks and history --------------------------------------------------------------
    def validate(self) -> None:
        for aid, a in self.actors.items():
            where = f"actor {aid.hex()}\n{self.story(aid)}"
            assert not (a.inflight & a.queue), f"a call both in flight and queued: {where}"
            assert a.inflight | a.queue <= set(a.calls), f"an unknown call is tracked: {where}"
            assert all(a.calls[t].ready for t in a.inflight | a.queue), f"unready sent: {where}"
            if a.state is State.ALIVE:
                assert not a.queue, f"calls queued while the actor is alive: {where}"
            if a.state is State.DEAD:
                assert not a.calls, f"a dead actor has calls: {where}"
            wires = sorted(a.wire(c.seq) for c in a.calls.values())
            assert len(set(wires)) == len(wires), f"two calls share a sequence number: {where}"
            order = sorted(a.calls.values(), key=lambda c: c.seq)
            assert [a.wire(c.seq) for c in order] == sorted(a.wire(c.seq) for c in order), \
                f"numbering does not keep submission order: {where}"

    def story(self, key: bytes) -> str:
        """Logged events and actions about an actor or a call, oldest first."""
        lines = [f"{e!r} -> {list(acts)!r}" for e, acts in map(_expand, self.log)
                 if key in (getattr(e, "actor_id", None), getattr(e, "task_id", None))
                 or any(key in (x.actor_id, x.task_id) for x in acts)]
        return "\n".join(lines) or f"(no events about {key.hex()})"


def _expand(entry: tuple[Any, ...]) -> tuple[Event, list[Action]]:
    """A log entry as (event, actions); the fast paths log their fields instead."""
    if not isinstance(entry[0], str):
        return entry[0], entry[1]
    if entry[0] == "Submit":
        _, aid, tid, address, wire = entry
        return Submit(aid, tid), [Send(aid, tid, address, wire)]
    _, aid, tid, *done = entry
    return Completed(aid, tid), [Done(aid, tid)] if done else []


def _by_seq(task_ids: set[bytes] | dict[bytes, _Call], calls: dict[bytes, _Call]
            ) -> list[bytes]:
    return sorted(task_ids, key=lambda t: calls[t].seq)
