"""The shell of the ownership core's hand-off of borrowed refs that a task returns.

A worker that returns a ref to a third process's object (it borrows it) tells the owner
first (`NoteBorrow`) and sends its answer only once the owner acknowledged (`BorrowNoted`):
the owner keeps the object for the caller from then on, whatever becomes of the worker. The
caller holds the ref while the return lives (`TakeReturned`) and tells the owner
(`HandOffBorrow`), which registers it as a borrower and ends its keeping; a caller that no
longer holds the return refuses the same way. If the worker dies before the caller settled,
the owner asks the caller to (`AskHandOff`): the answer may have been lost with it. A ref
the caller owns itself is lent by the worker (it keeps its borrow: let go before the result
came, it could free the object first); the caller holds it while the return lives and
settles the lend itself (`LendSettled`). Rules in `zmesh.core.ownership_lending`; this
module only turns the core's actions into messages, and holds answers back until they may go.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from zmesh.core.exhaustive import assert_never
from zmesh.core.ownership import (
    AckNote,
    Action,
    AskAgain,
    AskBorrower,
    BorrowNote,
    FailBorrowed,
    Free,
    HandedOff,
    HandOff,
    KeepBorrowed,
    Lend,
    LendDone,
    LostBorrowed,
    NoteAcked,
    NoteBorrow,
    ProbeOwner,
    ReadBorrowed,
    RefuseBorrow,
    ReleaseLender,
    SendAnswer,
    TakeReturned,
    Verdict,
)
from zmesh.errors import ObjectLostError
from zmesh.protocol.messages import runtime as m
from zmesh.runtime import context, values
from zmesh.runtime.ids import IdGen

__all__ = ["Lending", "lend_token"]

NOTE_PATIENCE_S = 2.0  # an answer held back this long sends its notes again and checks
# that the owners it waits for live
ASK_AGAIN_S = 2.0  # an owner asks a borrower to settle a dead lender's lend again after this
# (the ask or its answer may have been lost), until it is settled


def lend_token(task_id: bytes, attempt: int) -> bytes:
    """The lend of one answer: a repeated answer is the same lend, a retry's is another."""
    return task_id + attempt.to_bytes(4, "little")


class Lending:
    """Carries the hand-off messages of one process (driver or worker)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        # lend token -> (to, answer): answers that wait for owners to acknowledge our notes
        self._parked: dict[bytes, tuple[str, m.TaskResult]] = {}
        # token -> event: threads waiting until the notes of a lend are acknowledged
        self._waiters: dict[bytes, threading.Event] = {}
        self._watched: set[bytes] = set()  # tokens whose unanswered notes a timer watches
        self._asking = False  # a timer will ask again about dead lenders' open lends

    def register(self, loop: Any) -> None:
        loop.on(m.HandOffBorrow, self._on_hand_off)
        loop.on(m.LendSettled, self._on_settled)
        loop.on(m.NoteBorrow, self._on_note)
        loop.on(m.BorrowNoted, self._on_noted)
        loop.on(m.AskHandOff, self._on_ask)

    # -- the worker: before its result goes ------------------------------------------------
    def lend(self, task_id: bytes, attempt: int, lent: Sequence[m.Lent], caller: str,
             token: bytes | None = None, note: bool = True, wait: bool = False) -> None:
        """Keep the refs in `lent` for the caller: the caller's own until it says it holds
        them; for others' tell their owners (any thread; while the result still holds them,
        before it is sent: `answer` then holds the answer back until the owners
        acknowledged; `wait`: this thread waits for that here, `wait_noted`). `note` False:
        keep them all until the owners settle, without notes."""
        ids = tuple(x.object_id for x in lent)
        outers = tuple(IdGen.object_id(task_id, x.index) for x in lent)
        token = token or lend_token(task_id, attempt)
        self.carry(self.client.objects.handle(Lend(token, ids, caller, outers, note)),
                   threadsafe=True)
        if wait:
            self.wait_noted(token)

    def keep(self, token: bytes, object_ids: tuple[bytes, ...]) -> None:
        """We keep these borrowed argument refs past the work of lend `token`: tell their
        owners (any thread, before the answer goes through `answer`)."""
        self.carry(self.client.objects.handle(KeepBorrowed(token, object_ids)), threadsafe=True)

    def wait_noted(self, token: bytes) -> None:
        """Block this (non-loop) thread until every note of lend `token` is acknowledged (or
        its owner is taken for dead): what a sender cannot hold back in `answer` (a
        generator's item) it holds back here, before the item is buffered."""
        objects = self.client.objects
        event = threading.Event()
        with objects.lock:
            if token not in objects.core.awaiting:
                return
            self._waiters[token] = event
        wait = self.client.loop.wait_event
        while not wait(event, 0.5):  # (in steps: a cancel's async exception can land)
            pass

    def answer(self, to: str, result: m.TaskResult) -> None:
        """Send a task's answer (any thread): at once, unless it waits for owners to
        acknowledge the notes of its lend (then it goes when they have)."""
        self.client.loop.call_soon(self.answer_on_loop, to, result)

    def answer_on_loop(self, to: str, result: m.TaskResult) -> None:
        """`answer` on the loop thread (a resend of a kept answer too)."""
        token = lend_token(result.task_id, result.attempt)
        objects = self.client.objects
        with objects.lock:
            waits = token in objects.core.awaiting
        if waits:
            self._parked[token] = (to, result)  # (a resend replaces the same answer)
        else:
            self.client.loop.send(to, result)

    def _watch(self, token: bytes) -> None:
        """(loop thread) Notes of `token` went: see that they are answered."""
        if token not in self._watched:
            self._watched.add(token)
            self.client.loop.call_later(NOTE_PATIENCE_S, lambda: self._overdue(token))

    def _overdue(self, token: bytes) -> None:
        """Notes still unanswered (an answer held back, or a value kept for a read): send
        them again (a note or its acknowledgement may have been lost with a connection) and
        check that their owners live (one that died acknowledges nothing; its death lets
        what waits go on)."""
        with self.client.objects.lock:
            notes = list(self.client.objects.core.awaiting.get(token, {}).values())
        if not notes:
            self._watched.discard(token)
            return
        again: list[Action] = []
        again.extend(notes)
        self.carry(again)
        for owner in sorted({note.owner for note in notes}):
            self.client.owner_probe.check_alive(owner)
        self.client.loop.call_later(NOTE_PATIENCE_S, lambda: self._overdue(token))

    # -- a reader: refs inside a borrowed value (user thread) ---------------------------------
    def decode(self, ref: Any, value: m.Value, read: Any) -> Any:
        """`values.decode` of `ref`'s value; refs inside the value of a borrowed `ref` that we
        do not own are registered with their owners while our record of `ref` stays (a
        `ReadBorrowed`): dropping `ref` right after must not free them under us."""
        if ref.owner == self.client.address:
            return values.decode(value, read)
        with context.RefCollector() as inner:
            obj = values.decode(value, read)
        if inner.refs:
            me = self.client.address
            ids = tuple(r.id for r in inner.refs if r.owner != me)
            if ids:
                self.carry(self.client.objects.handle(ReadBorrowed(ref.id, ids)),
                           threadsafe=True)
        return obj

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

    def _on_ask(self, sender: str, msg: m.AskHandOff, bufs: list[Any]) -> None:
        """The owner asks us to settle a dead worker's lend: as if its answer had come."""
        groups: dict[bytes, list[bytes]] = {}
        for oid, outer in zip(msg.object_ids, msg.outers, strict=False):
            groups.setdefault(outer, []).append(oid)
        for outer, ids in groups.items():
            self.carry(self.client.objects.handle(TakeReturned(
                outer, tuple(ids), sender, msg.lender, msg.token)))

    # -- the owner, and the lender's release (loop thread) --------------------------------
    def _on_hand_off(self, sender: str, msg: m.HandOffBorrow, bufs: list[Any]) -> None:
        self.carry(self.client.objects.handle(HandedOff(
            tuple(msg.object_ids), msg.borrower, msg.lender, msg.token, msg.take)))

    def _on_settled(self, sender: str, msg: m.LendSettled, bufs: list[Any]) -> None:
        self.carry(self.client.objects.handle(LendDone(msg.token, tuple(msg.object_ids))))

    def _on_note(self, sender: str, msg: m.NoteBorrow, bufs: list[Any]) -> None:
        self.carry(self.client.objects.handle(BorrowNote(
            msg.token, tuple(msg.object_ids), tuple(msg.outers), msg.borrower, sender, msg.seq)))

    def _on_noted(self, sender: str, msg: m.BorrowNoted, bufs: list[Any]) -> None:
        self.carry(self.client.objects.handle(NoteAcked(msg.token, msg.seq, sender,
                                                        tuple(msg.lost))))

    def carry(self, actions: list[Action], threadsafe: bool = False) -> None:
        """Send what the core decided (loop thread, or `threadsafe` from another: in order
        with this process's other sends, so a hand-off or a note reaches the owner before
        any later RemoveBorrowers of ours)."""
        loop = self.client.loop
        send = loop.send_threadsafe if threadsafe else loop.send
        for action in actions:
            match action:
                case HandOff(owner, ids, lender, token, take):
                    send(owner, m.HandOffBorrow(object_ids=list(ids), borrower=self.client.address,
                                                lender=lender, token=token, take=take))
                case ReleaseLender(lender, token, ids):
                    send(lender, m.LendSettled(token=token, object_ids=list(ids)))
                case NoteBorrow(owner, token, ids, outers, borrower, seq):
                    send(owner, m.NoteBorrow(token=token, object_ids=list(ids),
                                             outers=list(outers), borrower=borrower, seq=seq))
                    if threadsafe:
                        loop.call_soon(self._watch, token)
                    else:
                        self._watch(token)
                case AckNote(lender, token, seq, lost):
                    send(lender, m.BorrowNoted(token=token, seq=seq, lost=list(lost)))
                    if threadsafe:  # (a lend kept for its borrower: asked about in time)
                        loop.call_soon(self._arm_ask)
                    else:
                        self._arm_ask()
                case LostBorrowed(oid, why):
                    self.client.objects.set_value(oid, values.encode_error(ObjectLostError(why)))
                case AskBorrower(borrower, token, ids, outers, lender):
                    send(borrower, m.AskHandOff(token=token, object_ids=list(ids),
                                                outers=list(outers), lender=lender))
                    if threadsafe:
                        loop.call_soon(self._arm_ask)
                    else:
                        self._arm_ask()
                case SendAnswer(token):
                    if threadsafe:
                        loop.call_soon(self._release, token)
                    else:
                        self._release(token)
                case Free() | RefuseBorrow() | FailBorrowed() | ProbeOwner() | Verdict():
                    pass  # Free: carried by the object table; the others come of other events
                case _:
                    assert_never(action)

    def _arm_ask(self) -> None:
        """(loop thread) We asked a borrower to settle, or keep a lend for one: ask again in
        ASK_AGAIN_S while any such lend is open (the core knows which)."""
        if not self._asking:
            self._asking = True
            self.client.loop.call_later(ASK_AGAIN_S, self._ask_again)

    def _ask_again(self) -> None:
        self._asking = False
        self.carry(self.client.objects.handle(AskAgain()))  # (its asks arm the next one)
        with self.client.objects.lock:
            pending = self.client.objects.core.asks_pending()
        if pending:  # (a live lender's open lend is asked about only after a while)
            self._arm_ask()

    def _release(self, token: bytes) -> None:
        with self.client.objects.lock:
            waiter = self._waiters.pop(token, None)
        if waiter is not None:
            waiter.set()
        parked = self._parked.pop(token, None)
        if parked is not None:
            self.client.loop.send(*parked)
