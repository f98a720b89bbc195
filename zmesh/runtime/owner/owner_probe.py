"""The shell of the ownership core's owner-death rule: what a failed read of a borrowed copy
means, decided by events instead of a timed wait.

A reader whose borrowed copy is gone asks the core (`ReadFailed`). If the owner's node was
already reported dead, the owner died. Otherwise the core asks for a probe: we ping the
owner; its answer means only the copy was lost, while the news of its node's death, a send
that cannot reach it, or no answer within the peer timeout mean the owner died.

A reader that awaits a value a borrowed ref's owner has not sent yet watches that owner
(`watch`): it pings it every second until the values come (asking again every REASK_S
while it answers: a lost request or answer is not waited on forever), and an owner silent for
`owner_timeout_s()` died, so those values fail with OwnerDiedError, as in Ray, instead of
never coming (a worker that owned a `put` and was killed is seen by nobody else).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from zmesh.core.exhaustive import assert_never
from zmesh.core.ownership import (
    AckNote,
    Action,
    AskBorrower,
    Event,
    FailBorrowed,
    Free,
    HandOff,
    LostBorrowed,
    NoteBorrow,
    OwnerAnswered,
    OwnerDied,
    ProbeOwner,
    ProbeTimedOut,
    ReadFailed,
    RefuseBorrow,
    ReleaseLender,
    SendAnswer,
    Verdict,
)
from zmesh.errors import OwnerDiedError
from zmesh.protocol.messages import runtime as m
from zmesh.protocol.messages.common import Ping, Pong
from zmesh.runtime import values
from zmesh.runtime.owner.node_watch import PING_PERIOD_S, node_timeout_s

if TYPE_CHECKING:
    from zmesh.runtime.owner.client import CoreClient


REASK_S = 5.0  # a live owner whose values have not come is asked again this often


def owner_timeout_s() -> float:
    """Silence after which the owner of a value we await counts as dead (ZMESH_OWNER_TIMEOUT_S,
    default 10 s, never above the peer timeout)."""
    try:
        wanted = float(os.environ.get("ZMESH_OWNER_TIMEOUT_S", "10"))
    except ValueError:
        wanted = 10.0
    return max(1.0, min(wanted, node_timeout_s()))


class OwnerProbe:
    """Verdicts on failed reads for one client; loop-thread methods unless said otherwise."""

    def __init__(self, client: CoreClient) -> None:
        self.client = client
        self._verdicts: dict[bytes, list[Future[Verdict]]] = {}  # under objects.lock
        self._probes: dict[int, str] = {}  # ping seq (negative) -> owner
        self._seqs = itertools.count(1)
        self.timeout = node_timeout_s()
        self.watch_timeout = owner_timeout_s()
        self._awaited: dict[str, set[bytes]] = {}  # watched owner -> values we await from it
        self._heard: dict[str, float] = {}  # watched owner -> when it last answered
        self._watch_pings: dict[int, str] = {}  # the latest ping seq (negative) -> owner
        self._last_tick: dict[str, float] = {}
        self._asked: dict[str, float] = {}  # watched owner -> when we last asked for values
        self._checks: dict[int, str] = {}  # ping seq (negative) -> owner we check is alive
        loop = client.loop
        loop.on(Ping, self._on_ping)
        loop.on(Pong, self._on_pong)

    def verdict(self, object_id: bytes, deadline: float | None) -> Verdict | None:
        """(user thread) What the failed read of `object_id` means; None past the deadline."""
        objects = self.client.objects
        fut: Future[Verdict] = Future()
        with objects.lock:
            actions = objects.handle(ReadFailed(object_id))
            now = next((a for a in actions if isinstance(a, Verdict)), None)
            if now is None:
                self._verdicts.setdefault(object_id, []).append(fut)
        if now is not None:
            return now
        self.client.loop.call_soon(self.carry, [a for a in actions if not isinstance(a, Verdict)])
        loop = self.client.loop
        left = None if deadline is None else max(0.0, deadline - loop.clock())
        try:
            return loop.wait_future(fut, left)  # type: ignore[no-any-return]
        except TimeoutError:
            return None

    def feed(self, event: Event) -> None:
        """Give the core an event (owner news) and carry out what it decides."""
        self.carry(self.client.objects.handle(event))

    def carry(self, actions: list[Action]) -> None:
        for action in actions:
            match action:
                case Verdict(oid):
                    with self.client.objects.lock:
                        futs = self._verdicts.pop(oid, [])
                    for fut in futs:
                        if not fut.done():
                            fut.set_result(action)
                case FailBorrowed(oid, why):
                    self.client.objects.set_value(oid, values.encode_error(OwnerDiedError(
                        f"the owner of this object died: {why}")))
                case ProbeOwner(owner):
                    self._probe(owner)
                case Free() | RefuseBorrow() | HandOff() | ReleaseLender():
                    pass  # carried out by the object table
                case SendAnswer() | NoteBorrow() | AckNote() | AskBorrower() | LostBorrowed():
                    self.client.lending.carry([action])  # (answers no dead owner holds back)
                case _:
                    assert_never(action)

    def _probe(self, owner: str) -> None:
        seq = -next(self._seqs)
        self._probes[seq] = owner
        if not self.client.loop.send(owner, Ping(seq=seq)):
            self._probes.pop(seq, None)
            self.feed(ProbeTimedOut(owner))
            return

        def expire() -> None:
            if self._probes.pop(seq, None) is not None:
                self.feed(ProbeTimedOut(owner))

        self.client.loop.call_later(self.timeout, expire)

    def check_alive(self, owner: str) -> None:
        """(loop thread) We wait on `owner` (an answer of ours held back for its
        acknowledgement): one it cannot reach, or that does not answer a ping within
        `watch_timeout` (as an owner whose values we await), died (`OwnerDied`: what waits on
        it goes on without it)."""
        seq = -next(self._seqs)
        self._checks[seq] = owner
        if not self.client.loop.send(owner, Ping(seq=seq)):
            self._checks.pop(seq, None)
            self.feed(OwnerDied(owner, f"its owner {owner} cannot be reached"))
            return

        def expire() -> None:
            if self._checks.pop(seq, None) is not None:
                self.feed(OwnerDied(owner, f"its owner {owner} did not answer for "
                                           f"{self.watch_timeout:.0f}s"))

        self.client.loop.call_later(self.watch_timeout, expire)

    # -- watching the owners of values we await -----------------------------------------------
    def watch(self, owner: str, object_ids: Iterable[bytes]) -> None:
        """(loop thread) We await the values of `object_ids`, owned by `owner`: ping it until
        they come; if it stays silent for `watch_timeout`, it died and they fail."""
        if owner == self.client.address:
            return
        waiting = self._awaited.setdefault(owner, set())
        first = not waiting
        waiting.update(object_ids)
        if first:
            now = self.client.loop.clock()
            self._heard[owner] = self._last_tick[owner] = now
            self._watch_tick(owner)

    def _watch_tick(self, owner: str) -> None:
        waiting = self._awaited.get(owner)
        if waiting is None:
            return
        entries = self.client.objects.entries
        for oid in [o for o in waiting if (e := entries.get(o)) is None or e.value is not None]:
            waiting.discard(oid)
        loop = self.client.loop
        now = loop.clock()
        if now - self._last_tick[owner] > self.watch_timeout / 2:
            self._heard[owner] = now  # we stood still: its answers may be queued
        self._last_tick[owner] = now
        silent = now - self._heard[owner]
        if not waiting or silent > self.watch_timeout:
            self._awaited.pop(owner, None)
            self._heard.pop(owner, None)
            self._last_tick.pop(owner, None)
            self._asked.pop(owner, None)
            for seq in [s for s, o in self._watch_pings.items() if o == owner]:
                del self._watch_pings[seq]
            if waiting:
                self.feed(OwnerDied(owner, f"its owner {owner} did not answer for "
                                           f"{silent:.0f}s"))
            return
        for seq in [s for s, o in self._watch_pings.items() if o == owner]:
            del self._watch_pings[seq]
        if now - self._asked.setdefault(owner, now) >= REASK_S:
            # It lives but the values have not come: ask again (a request or its answer may
            # have been lost with a connection; a second answer is ignored).
            self._asked[owner] = now
            for oid in sorted(waiting):
                loop.send(owner, m.GetObject(object_id=oid, requester=self.client.address))
        seq = -next(self._seqs)
        self._watch_pings[seq] = owner
        loop.send(owner, Ping(seq=seq))
        loop.call_later(PING_PERIOD_S, lambda: self._watch_tick(owner))

    def _on_ping(self, sender: str, msg: Ping, bufs: list[Any]) -> None:
        self.client.loop.send(sender, Pong(seq=msg.seq))

    def _on_pong(self, sender: str, msg: Pong, bufs: list[Any]) -> None:
        if msg.seq >= 0:
            self.client.node_watch.on_pong(sender, msg, bufs)
            return
        watched = self._watch_pings.pop(msg.seq, None)
        if watched is not None and watched in self._heard:
            self._heard[watched] = self.client.loop.clock()
        owner = self._probes.pop(msg.seq, None)
        if owner is not None:
            self.feed(OwnerAnswered(owner))
        self._checks.pop(msg.seq, None)  # (it lives: what waits on it keeps waiting)
