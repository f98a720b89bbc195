"""The shell of the ownership core's hand-off of borrowed refs that a task returns.

A worker that returns a ref to another process's object (it borrows it) keeps its borrow
(`Lend`) until the caller has taken the ref over: the caller holds it while the return lives
(`TakeReturned`) and tells the owner (`HandOffBorrow`), which registers the caller as a
borrower and only then tells the worker (`LendSettled`) to stop keeping it. A caller that no
longer holds the return refuses through the owner too, so every release of the worker's hold
comes after whatever the caller told the owner before. A ref the caller owns itself is lent
too (the worker's own borrow of it may be registered: let go before the result came, it
could free the object first); the caller, its owner, holds it while the return lives and
settles the lend itself.
The decisions are the core's; this module only turns its actions into messages.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from zmesh.core.exhaustive import assert_never
from zmesh.core.ownership import (
    Action,
    FailBorrowed,
    Free,
    HandedOff,
    HandOff,
    Lend,
    LendDone,
    ProbeOwner,
    RefuseBorrow,
    ReleaseLender,
    TakeReturned,
    Verdict,
)
from zmesh.protocol.messages import runtime as m
from zmesh.runtime.ids import IdGen

__all__ = ["Lending", "lend_token"]


def lend_token(task_id: bytes, attempt: int) -> bytes:
    """The lend of one answer: a repeated answer is the same lend, a retry's is another."""
    return task_id + attempt.to_bytes(4, "little")


class Lending:
    """Carries the hand-off messages of one process (driver or worker)."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def register(self, loop: Any) -> None:
        loop.on(m.HandOffBorrow, self._on_hand_off)
        loop.on(m.LendSettled, self._on_settled)

    # -- the worker: before its result goes ------------------------------------------------
    def lend(self, task_id: bytes, attempt: int, lent: Sequence[m.Lent], caller: str,
             token: bytes | None = None) -> None:
        """Keep the refs in `lent` until their owners say the caller took them over (any
        thread; while the result still holds them, before it is sent)."""
        ids = tuple(x.object_id for x in lent)  # (a Lend has no actions)
        self.client.objects.handle(Lend(token or lend_token(task_id, attempt), ids, caller))

    # -- the caller: a result came (loop thread) --------------------------------------------
    def take(self, sender: str, msg: m.TaskResult) -> None:
        """Hold the refs in the result's returns while each return lives; hand over (or
        refuse) the ones the sender lent us."""
        self.take_lent(sender, msg.task_id, msg.lent, lend_token(msg.task_id, msg.attempt))

    def take_lent(self, sender: str, task_id: bytes, lent: Sequence[m.Lent],
                  token: bytes | None) -> None:
        """`take` for the refs in `lent` (token None: one lend per return, a generator's
        items' way)."""
        groups: dict[tuple[int, str], list[bytes]] = {}
        for x in lent:
            groups.setdefault((x.index, x.owner), []).append(x.object_id)
        for (index, owner), ids in groups.items():
            outer = IdGen.object_id(task_id, index)
            self.carry(self.client.objects.handle(TakeReturned(
                outer, tuple(ids), owner, sender, outer if token is None else token)))

    # -- the owner, and the lender's release (loop thread) --------------------------------
    def _on_hand_off(self, sender: str, msg: m.HandOffBorrow, bufs: list[Any]) -> None:
        self.carry(self.client.objects.handle(HandedOff(
            tuple(msg.object_ids), msg.borrower, msg.lender, msg.token, msg.take)))

    def _on_settled(self, sender: str, msg: m.LendSettled, bufs: list[Any]) -> None:
        self.carry(self.client.objects.handle(LendDone(msg.token, tuple(msg.object_ids))))

    def carry(self, actions: list[Action]) -> None:
        """Send what the core decided (loop thread: in order with this thread's other sends,
        so a hand-off reaches the owner before any later RemoveBorrowers of ours)."""
        send = self.client.loop.send
        for action in actions:
            match action:
                case HandOff(owner, ids, lender, token, take):
                    send(owner, m.HandOffBorrow(object_ids=list(ids), borrower=self.client.address,
                                                lender=lender, token=token, take=take))
                case ReleaseLender(lender, token, ids):
                    send(lender, m.LendSettled(token=token, object_ids=list(ids)))
                case Free() | RefuseBorrow() | FailBorrowed() | ProbeOwner() | Verdict():
                    pass  # Free: carried by the object table; the others come of other events
                case _:
                    assert_never(action)
