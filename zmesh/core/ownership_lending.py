"""The hand-off rules of the ownership core (`zmesh.core.ownership`): refs a process returns
to a caller although it only borrows them, and what becomes of them when the lender, the
borrower or the owner dies on the way.

Three processes: a lender W (it returns others' refs inside a task's returns), the caller C
(it gets them) and the owner O of the objects. W tells O first (`NoteBorrow`) and sends its
answer only once O acknowledged (`SendAnswer`): from then on O keeps the objects for C
(a lend of O's own, keyed by W's token) until C took them over or refused them (`HandedOff`),
or died. So W's death at any moment frees nothing under C: before O's acknowledgement no
answer went (C never holds them), after it O keeps them; if W died before C settled, O asks
C to settle (`AskBorrower`), so a lost answer leaks nothing either. A ref C owns itself is
lent by W (W keeps its borrow) and settled by C once it holds it; no other process is
involved, and C's view of W's death comes after the answer (one connection, in order).

A mixin: its state lives on `Ownership`, which also gives `_maybe_free` and `_owner_death`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING

from zmesh.core.ownership_events import (
    AckNote,
    Action,
    AskAgain,
    AskBorrower,
    BorrowNote,
    HandedOff,
    HandOff,
    KeepBorrowed,
    Lend,
    LendDone,
    LostBorrowed,
    NoteAcked,
    NoteBorrow,
    ReadBorrowed,
    ReleaseLender,
    SendAnswer,
    TakeReturned,
)

if TYPE_CHECKING:
    from zmesh.core.ownership import Record

__all__ = ["LIVE_LENDER_TICKS", "SETTLED_NOTES", "LendingRules"]

SETTLED_NOTES = 4096  # settled noted lends an owner remembers (repeated notes of them are ignored)
# `AskAgain` ticks (2 s each at the owner) a noted lend whose lender lives stays open before
# its borrower is asked to settle it (its `HandOffBorrow` may have been lost): long past the
# lender's answer in any but a stalled process (an answer that comes after the ask, a
# refusal, may find its objects freed: its refs are lost, never a freed value held)
LIVE_LENDER_TICKS = 15


class LendingRules:
    """The rules of lends, hand-offs and borrow notes (mixed into `Ownership`)."""

    address: str
    records: dict[bytes, Record]
    _record: type[Record]
    # token -> (borrower, the objects still lent): refs returned to a caller (or, at their
    # owner, noted by a lender), kept until the caller took them over (or refused them)
    lends: dict[bytes, tuple[str, list[bytes]]]
    # (at an owner) token -> (lender, {object id: the return of the borrower holding it},
    # the numbers of the notes kept) for the lends that lenders noted with us
    noted: dict[bytes, tuple[str, dict[bytes, bytes], set[int]]]
    # (at a lender) token -> {note number: the note, not yet acknowledged}: the answer waits
    awaiting: dict[bytes, dict[int, NoteBorrow]]
    reading: set[bytes]  # tokens of reads whose value we keep until their notes are answered
    # (at an owner) the tokens of noted lends already settled, newest last (at most
    # SETTLED_NOTES): a note of one that comes again (a resend overtaken by the hand-off)
    # is acknowledged and kept no more
    settled_notes: OrderedDict[bytes, None]
    # (at an owner) token -> the `AskAgain` ticks an open noted lend whose lender lives saw
    noted_ticks: dict[bytes, int]
    _seq: int  # the number of our latest note
    gone: set[str]  # processes whose death we handled (their addresses)
    gone_prefixes: set[str]  # ... and every process with ipc sockets under these

    def _maybe_free(self, oid: bytes, out: list[Action]) -> None:
        raise NotImplementedError  # (Ownership's)

    def _owner_death(self, owner: str) -> str:
        raise NotImplementedError  # (Ownership's)

    def _is_gone(self, address: str) -> bool:
        return address in self.gone or (bool(self.gone_prefixes) and any(
            address.startswith(p) for p in self.gone_prefixes))

    def dropped(self, address: str) -> bool:
        """Whether we handled the death of the process at `address` (we borrow it nothing
        and lend it nothing any more). One taken for dead that lives on (paused,
        partitioned) gets a clear error for each of our objects it asks for, whether or not
        the object still lives: its refs are lost, consistently, not valid while others
        hold the object and gone when they let go."""
        return self._is_gone(address)

    # -- the lender ------------------------------------------------------------------------
    def _lend(self, e: Lend, out: list[Action]) -> None:
        if self._is_gone(e.borrower):  # (an actor's answer to a caller that died: it takes
            return  # nothing over, and a lend kept for it would never end)
        kept: list[bytes] = []
        notes: dict[str, list[int]] = {}
        for i, oid in enumerate(e.object_ids):
            rec = self.records.get(oid)
            if rec is None or rec.owned:  # (ours: the caller borrows them from us instead)
                continue
            if not e.note:  # kept until settled (by the caller once it holds them, if it
                # owns them; else by their owner once the caller took them over)
                kept.append(oid)
            elif not self._owner_death(rec.owner):  # (a dead owner's are lost anyway)
                notes.setdefault(rec.owner, []).append(i)
        for oid in kept:
            self.records[oid].lent += 1
        if kept:
            _, already = self.lends.setdefault(e.token, (e.borrower, []))
            already.extend(kept)
        outers = e.outers if len(e.outers) == len(e.object_ids) else ()
        for owner, idx in notes.items():
            self._note(owner, e.token, tuple(e.object_ids[i] for i in idx),
                       tuple(outers[i] for i in idx) if outers else (), e.borrower, out)

    def _note(self, owner: str, token: bytes, ids: tuple[bytes, ...],
              outers: tuple[bytes, ...], borrower: str, out: list[Action]) -> None:
        self._seq += 1
        note = NoteBorrow(owner, token, ids, outers, borrower, self._seq)
        self.awaiting.setdefault(token, {})[self._seq] = note
        out.append(note)

    def _note_acked(self, e: NoteAcked, out: list[Action]) -> None:
        waiting = self.awaiting.get(e.token)
        if waiting is None:
            return
        note = waiting.get(e.seq)
        if note is None or note.owner != e.owner:
            return
        del waiting[e.seq]
        if note.borrower == self.address:  # we borrow them ourselves now (while we hold them)
            for oid in note.object_ids:
                rec = self.records.get(oid)
                if rec is None or rec.owned:
                    continue
                if oid in e.lost:  # (freed before our note came, or we were taken for dead)
                    out.append(LostBorrowed(oid, f"object {oid.hex()} was freed by its owner "
                                            f"{e.owner} before this process could register "
                                            "as its borrower (the process that passed it "
                                            "here died, or this one was taken for dead)"))
                else:
                    rec.registered = True
        if not waiting:
            del self.awaiting[e.token]
            self._noted_all(e.token, out)

    def _answers_of_dead_owners(self, dead: Callable[[str], bool], out: list[Action]) -> None:
        """Owners that died acknowledge nothing: answers waiting only for them go."""
        for token, waiting in list(self.awaiting.items()):
            for seq in [n for n, note in waiting.items() if dead(note.owner)]:
                del waiting[seq]
            if not waiting:
                del self.awaiting[token]
                self._noted_all(token, out)

    def _noted_all(self, token: bytes, out: list[Action]) -> None:
        """Every note of `token` acknowledged (or its owner dead): its answer may go, or the
        value a read pinned may go."""
        if token in self.reading:
            self.reading.discard(token)
            self._end_lend(token, None, out)
        else:
            out.append(SendAnswer(token))

    def _lend_done(self, e: LendDone, out: list[Action]) -> None:
        self._end_lend(e.token, e.object_ids, out)

    def _keep_borrowed(self, e: KeepBorrowed, out: list[Action]) -> None:
        # (an actor registers for a call's borrowed arguments as the call starts, so that
        # its caller's death frees nothing under it; at the call's end what it still holds
        # is registered already, or its note is on its way and the answer waits for it)
        pending = {oid for note in self.awaiting.get(e.token, {}).values()
                   if note.borrower == self.address for oid in note.object_ids}
        notes: dict[str, list[bytes]] = {}
        for oid in e.object_ids:
            rec = self.records.get(oid)
            if rec is not None and not rec.owned and not rec.registered \
                    and oid not in pending and not self._owner_death(rec.owner):
                notes.setdefault(rec.owner, []).append(oid)
        for owner, ids in notes.items():
            self._note(owner, e.token, tuple(ids), (), self.address, out)

    # -- a reader of a value holding others' refs ------------------------------------------
    def _read_borrowed(self, e: ReadBorrowed, out: list[Action]) -> None:
        host = self.records.get(e.outer)
        if host is None or host.owned:  # (ours holds them for us as long as we need them)
            return
        notes: dict[str, list[bytes]] = {}
        for oid in e.inner:
            rec = self.records.get(oid)
            if rec is not None and not rec.owned and not self._owner_death(rec.owner):
                notes.setdefault(rec.owner, []).append(oid)
        if not notes:
            return
        self._seq += 1
        token = b"read:" + e.outer + self._seq.to_bytes(8, "little")
        host.lent += 1  # the value stays until the owners registered us (a lend to us)
        self.lends[token] = (self.address, [e.outer])
        self.reading.add(token)
        for owner, ids in notes.items():
            self._note(owner, token, tuple(ids), (), self.address, out)

    # -- the caller --------------------------------------------------------------------------
    def _take_returned(self, e: TakeReturned, out: list[Action]) -> None:
        host = self.records.get(e.outer)
        if e.owner == self.address:  # ours: we settle the lend ourselves, once we hold them
            if host is not None:
                mine = tuple(i for i in e.inner if i in self.records)  # (a freed one is gone)
                for i in mine:
                    self.records[i].local += 1
                host.held = host.held + mine
            lend = self.lends.get(e.token)
            if e.token in self.noted and lend is not None and lend[0] == self.address:
                self._end_lend(e.token, e.inner, out)  # we kept them: the lender let go
            else:
                out.append(ReleaseLender(e.lender, e.token, e.inner))
            return
        if host is None:  # nobody can read the value: refuse (the lender's hold ends),
            # but what we hold another way we take (a repeated ask whose first answer, a
            # take, was lost: a refusal now would free what we still hold)
            held = tuple(i for i in e.inner if i in self.records)
            if held:
                out.append(HandOff(e.owner, held, e.lender, e.token, True))
            if len(held) < len(e.inner):
                out.append(HandOff(e.owner, tuple(i for i in e.inner if i not in held),
                                   e.lender, e.token, False))
            return
        for i in e.inner:
            rec = self.records.get(i)
            if rec is None:
                rec = self.records[i] = self._record(e.owner, False)
            rec.local += 1
        host.held = host.held + e.inner
        out.append(HandOff(e.owner, e.inner, e.lender, e.token, True))

    # -- the owner ---------------------------------------------------------------------------
    def _borrow_note(self, e: BorrowNote, out: list[Action]) -> None:
        lost: tuple[bytes, ...] = ()
        if e.borrower == e.lender:  # it registers itself: say what it is not registered for
            lost = e.object_ids if self._is_gone(e.lender) else tuple(
                oid for oid in e.object_ids
                if oid not in self.records or not self.records[oid].owned)
        out.append(AckNote(e.lender, e.token, e.seq, lost))  # (to one taken for dead too:
        # it may live, and then knows its refs are lost)
        gone = self._is_gone(e.lender)
        if gone and e.borrower == e.lender:  # (it registers nothing now)
            return
        # A lender we took for dead: if it died, its answer never went (it waited for this);
        # if it lives on (paused, partitioned), its answer goes now. We keep what it hands
        # over for the borrower either way and ask the borrower to settle at once (again
        # while it is open: `AskAgain`), as for a lender that died after its note.
        kept_already = self.noted.get(e.token)
        if kept_already is not None and e.seq in kept_already[2]:
            return  # a repeated note (our acknowledgement was lost): kept already
        if e.token in self.settled_notes:
            return  # a repeated note whose lend the borrower settled meanwhile
        if e.borrower == e.lender:  # it keeps them itself: register it
            for oid in e.object_ids:
                rec = self.records.get(oid)
                if rec is not None and rec.owned:
                    if rec.borrowers is None:
                        rec.borrowers = set()
                    rec.borrowers.add(e.borrower)
            return
        if self._is_gone(e.borrower):  # it died: it takes nothing over
            return
        outers = e.outers if len(e.outers) == len(e.object_ids) else (b"",) * len(e.object_ids)
        kept = [(oid, outer) for oid, outer in zip(e.object_ids, outers, strict=True)
                if oid in self.records and self.records[oid].owned]
        if not kept:
            return
        for oid, _ in kept:
            self.records[oid].lent += 1
        _, already = self.lends.setdefault(e.token, (e.borrower, []))
        already.extend(oid for oid, _ in kept)
        _, where, seqs = self.noted.setdefault(e.token, (e.lender, {}, set()))
        where.update(kept)
        seqs.add(e.seq)
        if gone:
            ids = tuple(sorted(where))
            out.append(AskBorrower(e.borrower, e.token, ids, tuple(where[i] for i in ids),
                                   e.lender))

    def _handed_off(self, e: HandedOff, out: list[Action]) -> None:
        if e.take and not self._is_gone(e.borrower):  # (a dead one's late news registers
            # nothing: it borrows nothing now)
            for oid in e.object_ids:
                rec = self.records.get(oid)
                if rec is not None and rec.owned:
                    if rec.borrowers is None:
                        rec.borrowers = set()
                    rec.borrowers.add(e.borrower)
        lend = self.lends.get(e.token)
        if e.token in self.noted and lend is not None and lend[0] == e.borrower:
            self._end_lend(e.token, e.object_ids, out)  # we kept them: the lender let go
            return
        out.append(ReleaseLender(e.lender, e.token, e.object_ids))

    def _lends_of_gone(self, dead: Callable[[str], bool], out: list[Action]) -> None:
        """Lends to processes that died end; noted lends whose lender died are settled by
        their borrower, which we ask to (the answer may never have reached it)."""
        for token, (borrower, _) in list(self.lends.items()):  # it takes over nothing now
            if dead(borrower):
                self._end_lend(token, None, out)
        for token, (lender, where, _) in sorted(self.noted.items()):
            if not dead(lender):
                continue
            borrower = self.lends[token][0]
            ids = tuple(sorted(where))
            outers = tuple(where[i] for i in ids)
            if borrower != self.address:
                out.append(AskBorrower(borrower, token, ids, outers, lender))
                continue
            for oid, outer in zip(ids, outers, strict=True):  # we are the borrower: settle
                self._take_returned(TakeReturned(outer, (oid,), self.address, lender, token),
                                    out)

    def _ask_again(self, e: AskAgain, out: list[Action]) -> None:
        """Ask again every borrower of a noted lend whose lender died (the lends a
        `BorrowerGone` asked about that are still open): the ask or its answer may have
        been lost; a borrower answers a repeated ask as the first (a repeated take holds
        as much as it releases later; a refusal leaves out what it still holds). A lend
        whose lender lives is asked about once it stayed open `LIVE_LENDER_TICKS` asks:
        the borrower's `HandOffBorrow` may have been lost, and nothing else would end it
        before the borrower died."""
        for token, (lender, where, _) in sorted(self.noted.items()):
            borrower = self.lends[token][0]
            if borrower == self.address:
                continue
            if not self._is_gone(lender):
                ticks = self.noted_ticks.get(token, 0) + 1
                self.noted_ticks[token] = ticks
                if ticks < LIVE_LENDER_TICKS:
                    continue
            ids = tuple(sorted(where))
            out.append(AskBorrower(borrower, token, ids, tuple(where[i] for i in ids),
                                   lender))

    def asks_pending(self) -> bool:
        """(At an owner) whether a noted lend is open: its shell keeps the `AskAgain` timer
        running while one is (a live lender's lend is asked about only after a while)."""
        return bool(self.noted)

    # -- any ---------------------------------------------------------------------------------
    def _end_lend(self, token: bytes, object_ids: tuple[bytes, ...] | None,
                  out: list[Action]) -> None:
        """Stop keeping `object_ids` (None: all) of lend `token` (each id once)."""
        lend = self.lends.get(token)
        if lend is None:  # settled already (a repeated answer's hand-off)
            return
        left = lend[1]
        ended = list(left) if object_ids is None else [i for i in object_ids if i in left]
        noted = self.noted.get(token)
        for oid in ended:
            left.remove(oid)
            if noted is not None and oid not in left:
                noted[1].pop(oid, None)
            rec = self.records.get(oid)
            if rec is not None:
                rec.lent -= 1
                self._maybe_free(oid, out)
        if not left:
            del self.lends[token]
            self.noted_ticks.pop(token, None)
            if self.noted.pop(token, None) is not None:
                self.settled_notes[token] = None
                if len(self.settled_notes) > SETTLED_NOTES:
                    self.settled_notes.popitem(last=False)

    def _drop_own_notes(self, oid: bytes, owner: str, out: list[Action]) -> None:
        """We stopped borrowing `oid` (our `Free` tells `owner`) before `owner` acknowledged
        a note that registers us for it (a borrowed argument we kept, refs of a value we
        read): that note is not sent again, since a resend after our release would register
        us anew, for good. One already sent arrives before the release (one channel, in
        order); a lost one registered nothing. An answer waiting only for it goes."""
        for token, waiting in list(self.awaiting.items()):
            for seq, note in list(waiting.items()):
                if (note.owner != owner or note.borrower != self.address
                        or oid not in note.object_ids):
                    continue
                keep = [i for i, o in enumerate(note.object_ids) if o != oid]
                if not keep:
                    del waiting[seq]
                    continue
                outers = tuple(note.outers[i] for i in keep) if note.outers else ()
                waiting[seq] = NoteBorrow(owner, token, tuple(note.object_ids[i] for i in keep),
                                          outers, note.borrower, seq)
            if not waiting:
                del self.awaiting[token]
                self._noted_all(token, out)

    def _check_lends(self) -> None:
        """The invariants of lends and notes (part of `Ownership.validate`)."""
        for token, (lender, where, _) in self.noted.items():
            assert where, f"an empty noted lend {token.hex()}"
            assert token in self.lends, f"noted lend {token.hex()} of {lender} is not kept"
            for oid in where:
                assert oid in self.lends[token][1], f"noted {oid.hex()} is not lent"
        for token, waiting in self.awaiting.items():
            assert waiting, f"answer {token.hex()} waits for nothing"
        for token in self.noted_ticks:
            assert token in self.noted, f"ticks of a settled lend {token.hex()}"
        for token in self.reading:
            assert token in self.awaiting and token in self.lends, f"a stale read {token.hex()}"
