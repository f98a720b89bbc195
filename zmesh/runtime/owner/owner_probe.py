"""The shell of the ownership core's owner-death rule: what a failed read of a borrowed copy
means, decided by events instead of a timed wait.

A reader whose borrowed copy is gone asks the core (`ReadFailed`). If the owner's node was
already reported dead, the owner died. Otherwise the core asks for a probe: we ping the
owner; its answer means only the copy was lost, while the news of its node's death, a send
that cannot reach it, or no answer within the peer timeout mean the owner died.
"""

from __future__ import annotations

import itertools
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from zmesh.core.exhaustive import assert_never
from zmesh.core.ownership import (
    Action,
    Event,
    FailBorrowed,
    Free,
    OwnerAnswered,
    ProbeOwner,
    ProbeTimedOut,
    ReadFailed,
    RefuseBorrow,
    Verdict,
)
from zmesh.errors import OwnerDiedError
from zmesh.protocol.messages.common import Ping, Pong
from zmesh.runtime import values
from zmesh.runtime.owner.node_watch import node_timeout_s

if TYPE_CHECKING:
    from zmesh.runtime.owner.client import CoreClient


class OwnerProbe:
    """Verdicts on failed reads for one client; loop-thread methods unless said otherwise."""

    def __init__(self, client: CoreClient) -> None:
        self.client = client
        self._verdicts: dict[bytes, list[Future[Verdict]]] = {}  # under objects.lock
        self._probes: dict[int, str] = {}  # ping seq (negative) -> owner
        self._seqs = itertools.count(1)
        self.timeout = node_timeout_s()
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
                case Free() | RefuseBorrow():
                    pass  # carried out by the object table
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

    def _on_ping(self, sender: str, msg: Ping, bufs: list[Any]) -> None:
        self.client.loop.send(sender, Pong(seq=msg.seq))

    def _on_pong(self, sender: str, msg: Pong, bufs: list[Any]) -> None:
        if msg.seq >= 0:
            self.client.node_watch.on_pong(sender, msg, bufs)
            return
        owner = self._probes.pop(msg.seq, None)
        if owner is not None:
            self.feed(OwnerAnswered(owner))
