"""Ownership as a pure state machine: reference counts, borrowers, and owner death.

One per process (driver or worker). It decides when an object this process tracks is
released (its local refs, the tasks that take it as an argument, the objects whose value
holds it, and — for an object it owns — its borrowers are all gone), and what a failed
read of a borrowed copy means: the owner died (its node's death was announced, or it did
not answer a probe in time) or only the copy was lost (the owner answered). No I/O and no
clock: the shell feeds events in (`handle`) and carries the actions out.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import Any, Literal

import msgspec

from zmesh.core.ownership_events import (
    AckNote,
    Action,
    AddBorrower,
    AddLocal,
    AddSubmitted,
    AskAgain,
    AskBorrower,
    BorrowerGone,
    BorrowNote,
    Escaped,
    Event,
    FailBorrowed,
    Free,
    HandedOff,
    HandOff,
    HoldArgs,
    HoldBorrowed,
    HoldContained,
    KeepBorrowed,
    Lend,
    LendDone,
    LostBorrowed,
    NodeBack,
    NoteAcked,
    NoteBorrow,
    OwnerAnswered,
    OwnerDied,
    OwnerNodeDied,
    ProbeOwner,
    ProbeTimedOut,
    ReadBorrowed,
    ReadFailed,
    RefuseBorrow,
    ReleaseArgs,
    ReleaseLender,
    RemoveBorrower,
    RemoveLocal,
    RemoveSubmitted,
    SendAnswer,
    TakeReturned,
    Verdict,
)
from zmesh.core.ownership_lending import LendingRules

__all__ = [
    "AckNote", "AddBorrower", "AddLocal", "AddSubmitted", "AskAgain", "AskBorrower", "BorrowNote",
    "BorrowerGone", "Event", "Action", "Escaped", "Free", "FailBorrowed", "HandOff", "HandedOff",
    "HoldArgs", "HoldBorrowed", "HoldContained", "KeepBorrowed", "Lend", "LendDone", "LostBorrowed", "NodeBack", "NoteAcked", "NoteBorrow",
    "OwnerAnswered", "OwnerDied", "OwnerNodeDied", "Ownership", "ProbeOwner", "ProbeTimedOut",
    "ReadBorrowed", "ReadFailed", "RefuseBorrow", "ReleaseArgs", "ReleaseLender", "RemoveBorrower", "RemoveLocal",
    "RemoveSubmitted", "SendAnswer", "TakeReturned", "Verdict",
]


class Record(msgspec.Struct):
    """Counts of one tracked object."""

    owner: str
    owned: bool
    local: int = 0
    submitted: int = 0
    borrowers: set[str] | None = None  # made on the first borrower (most objects have none)
    escaped: bool = False
    contained: tuple[bytes, ...] = ()
    held: tuple[bytes, ...] = ()
    lent: int = 0  # open lends of it (returned to a caller that has not taken it over yet)
    registered: bool = False  # (borrowed) its owner acknowledged a note registering us

    def in_use(self) -> bool:
        return bool(self.local or self.submitted or self.borrowers or self.escaped
                    or self.lent)


class Ownership(LendingRules):
    """The ownership machine of one process at `address`; `handle(event) -> actions`."""

    def __init__(self, address: str, log_size: int = 10_000,
                 record: type[Record] = Record) -> None:
        self.address = address
        # the class of the records made (a shell may extend Record with fields of its own,
        # e.g. the value, so that one object per tracked object serves both)
        self._record = record
        self.records: dict[bytes, Record] = {}
        self.dead_owners: list[tuple[str, str, str]] = []  # (address, ipc prefix, why)
        self.probing: dict[str, set[bytes]] = {}  # owner -> failed reads awaiting a verdict
        # token -> (borrower, the objects still lent): refs returned to a caller, kept until
        # their owner says the caller took them over (or refused them)
        self.lends: dict[bytes, tuple[str, list[bytes]]] = {}
        # (the hand-off's state: see ownership_lending.LendingRules)
        self.noted: dict[bytes, tuple[str, dict[bytes, bytes], set[int]]] = {}
        self.awaiting: dict[bytes, dict[int, NoteBorrow]] = {}
        self.gone: set[str] = set()  # processes whose death we handled (their addresses)
        self.gone_prefixes: set[str] = set()  # ... and every one under these ipc prefixes
        self.reading: set[bytes] = set()
        self.settled_notes: OrderedDict[bytes, None] = OrderedDict()
        self.noted_ticks: dict[bytes, int] = {}
        # actor id -> the refs held (counted as submitted) for its constructor's arguments
        self.held_args: dict[bytes, tuple[bytes, ...]] = {}
        self._seq = 0
        # (event, actions); the fast paths log (event name, *its fields) instead, which
        # story() turns back into the event: no event object per ref on the hot path.
        self.log: deque[tuple[Any, ...]] = deque(maxlen=log_size)

    # -- the entry point -----------------------------------------------------------------
    def handle(self, event: Event) -> list[Action]:
        """Apply one event; return what the shell must do."""
        out: list[Action] = []
        rule = _RULES.get(type(event))
        if rule is None:
            raise TypeError(f"not an ownership event: {event!r}")
        rule(self, event, out)  # type: ignore[operator]
        self.log.append((event, tuple(out) if out else ()))
        return out

    # -- fast paths: the same rules as handle(AddLocal) / handle(RemoveLocal), without --
    # -- building the event: every ObjectRef made or dropped comes through here --------
    def add_local(self, object_id: bytes, owner: str) -> Record | None:
        """`handle(AddLocal(object_id, owner))`; returns the Record if it is new."""
        self.log.append(("AddLocal", object_id, owner))
        rec = self.records.get(object_id)
        if rec is not None:
            rec.local += 1
            return None
        rec = self.records[object_id] = self._record(owner, owner == self.address, 1)
        return rec

    def remove_local(self, object_id: bytes) -> list[Action]:
        """`handle(RemoveLocal(object_id))`."""
        out = self.release_local(object_id)
        if isinstance(out, list):
            return out
        _, _, owner, owned = self.log[-1]  # (the Record's fields, in the entry just made)
        return [Free(object_id, owner, owned, ())]

    def add_submitted(self, object_ids: tuple[bytes, ...]) -> None:
        """`handle(AddSubmitted(object_ids))` (it has no actions): every task with ref
        arguments comes through here and `remove_submitted`."""
        self.log.append(("AddSubmitted", object_ids))
        records = self.records
        for oid in object_ids:
            rec = records.get(oid)
            if rec is not None:
                rec.submitted += 1

    def remove_submitted(self, object_ids: tuple[bytes, ...]) -> list[Action]:
        """`handle(RemoveSubmitted(object_ids))`, without building the event."""
        out: list[Action] = []
        records = self.records
        for oid in object_ids:
            rec = records.get(oid)
            if rec is not None:
                rec.submitted -= 1
                if not rec.in_use():
                    self._maybe_free(oid, out)
        if out:
            self.log.append((RemoveSubmitted(object_ids), tuple(out)))
            return out
        self.log.append(("RemoveSubmitted", object_ids))
        return _NOTHING

    def release_local(self, object_id: bytes) -> list[Action] | Literal[True]:
        """`remove_local` for the hot path of every ref: True instead of the common outcome,
        `[Free(object_id, owner, owned, ())]` (it alone is freed: no action object made)."""
        rec = self.records.get(object_id)
        if rec is not None:
            rec.local -= 1
            if not (rec.local or rec.submitted or rec.borrowers or rec.escaped or rec.lent):
                if rec.contained or rec.held or (self.awaiting and not rec.owned):
                    out: list[Action] = []
                    self._maybe_free(object_id, out)
                    self.log.append((RemoveLocal(object_id), tuple(out)))
                    return out
                # the common case, inline: nothing else is released with it
                del self.records[object_id]
                self.log.append(("Freed", object_id, rec.owner, rec.owned))
                return True
        self.log.append(("RemoveLocal", object_id))
        return _NOTHING

    # -- one rule per event (dispatched by type: this is the hot path of every ref) --------
    def _add_local(self, e: AddLocal, out: list[Action]) -> None:
        rec = self.records.get(e.object_id)
        if rec is None:
            rec = self.records[e.object_id] = self._record(e.owner, e.owner == self.address)
        rec.local += 1

    def _remove_local(self, e: RemoveLocal, out: list[Action]) -> None:
        rec = self.records.get(e.object_id)
        if rec is not None:
            rec.local -= 1
            self._maybe_free(e.object_id, out)

    def _add_submitted(self, e: AddSubmitted, out: list[Action]) -> None:
        for oid in e.object_ids:
            rec = self.records.get(oid)
            if rec is not None:
                rec.submitted += 1

    def _remove_submitted(self, e: RemoveSubmitted, out: list[Action]) -> None:
        for oid in e.object_ids:
            rec = self.records.get(oid)
            if rec is not None:
                rec.submitted -= 1
                self._maybe_free(oid, out)

    def _add_borrower(self, e: AddBorrower, out: list[Action]) -> None:
        if self._is_gone(e.borrower):  # (news it sent before it died)
            return
        for oid in e.object_ids:
            rec = self.records.get(oid)
            if rec is not None:
                if rec.borrowers is None:
                    rec.borrowers = set()
                rec.borrowers.add(e.borrower)

    def _remove_borrower(self, e: RemoveBorrower, out: list[Action]) -> None:
        for oid in e.object_ids:
            rec = self.records.get(oid)
            if rec is not None:
                if rec.borrowers:
                    rec.borrowers.discard(e.borrower)
                self._maybe_free(oid, out)

    def _borrower_gone(self, e: BorrowerGone, out: list[Action]) -> None:
        address, prefix = e.address, e.prefix

        def hit(a: str) -> bool:
            return a == address or bool(prefix and a.startswith(prefix))

        # every process we know of there, kept by address: the prefix goes if the node comes
        # back (`NodeBack`), these stay gone (the processes a false death left alive)
        known = {address}
        known.update(b for b, _ in self.lends.values() if hit(b))
        known.update(lender for lender, _, _ in self.noted.values() if hit(lender))
        # a copy made in one C step: building a list of item tuples can run the collector,
        # whose finalizers (a dropped ref's decref) change `records` mid-iteration
        for oid, rec in self.records.copy().items():
            if not rec.borrowers:
                continue
            gone = {b for b in rec.borrowers if hit(b)}
            if gone:
                known |= gone
                rec.borrowers -= gone
                self._maybe_free(oid, out)
        self.gone |= known
        if prefix:
            self.gone_prefixes.add(prefix)
        self._lends_of_gone(
            lambda a: a == address or bool(prefix and a.startswith(prefix)), out)

    def _hold_args(self, e: HoldArgs, out: list[Action]) -> None:
        if e.key in self.held_args:
            return
        ids = tuple(oid for oid in e.object_ids if oid in self.records)
        for oid in ids:
            self.records[oid].submitted += 1
        self.held_args[e.key] = ids

    def _release_args(self, e: ReleaseArgs, out: list[Action]) -> None:
        for oid in self.held_args.pop(e.key, ()):
            rec = self.records.get(oid)
            if rec is not None:
                rec.submitted -= 1
                self._maybe_free(oid, out)

    def _escaped(self, e: Escaped, out: list[Action]) -> None:
        for oid in e.object_ids:
            rec = self.records.get(oid)
            if rec is not None:
                rec.escaped = True

    def _hold_contained(self, e: HoldContained, out: list[Action]) -> None:
        rec = self.records.get(e.object_id)
        if rec is not None:
            rec.contained = rec.contained + e.inner
            for i in e.inner:
                inner_rec = self.records.get(i)
                if inner_rec is not None:
                    inner_rec.submitted += 1

    def _on_hold_borrowed(self, e: HoldBorrowed, out: list[Action]) -> None:
        self._hold_borrowed(e.outer, e.inner, e.owner, out)

    def _on_read_failed(self, e: ReadFailed, out: list[Action]) -> None:
        self._read_failed(e.object_id, out)

    def _on_owner_node_died(self, e: OwnerNodeDied, out: list[Action]) -> None:
        self._owner_node_died(e.address, e.ipc_prefix, e.why, out)

    def _on_owner_died(self, e: OwnerDied, out: list[Action]) -> None:
        self._owner_node_died(e.owner, "", e.why, out)

    def _owner_answered(self, e: OwnerAnswered, out: list[Action]) -> None:
        for oid in sorted(self.probing.pop(e.owner, ())):
            out.append(Verdict(oid, False, ""))

    def _probe_timed_out(self, e: ProbeTimedOut, out: list[Action]) -> None:
        why = f"its owner {e.owner} did not answer"
        for oid in sorted(self.probing.pop(e.owner, ())):
            out.append(Verdict(oid, True, why))

    # -- rules ---------------------------------------------------------------------------
    def _maybe_free(self, oid: bytes, out: list[Action]) -> None:
        rec = self.records.get(oid)
        if rec is None or rec.in_use():
            return
        del self.records[oid]
        out.append(Free(oid, rec.owner, rec.owned, rec.held))
        if self.awaiting and not rec.owned:
            self._drop_own_notes(oid, rec.owner, out)
        for i in rec.contained:  # values inside an owned value were held like arguments
            inner = self.records.get(i)
            if inner is not None:
                inner.submitted -= 1
                self._maybe_free(i, out)
        for i in rec.held:
            inner = self.records.get(i)
            if inner is not None:
                inner.local -= 1
                self._maybe_free(i, out)

    def _hold_borrowed(self, outer: tuple[bytes, ...], inner: tuple[bytes, ...], owner: str,
                       out: list[Action]) -> None:
        # every live outer value holds them (which of them holds which ref is not said: a
        # batch of a generator's items, the returns of one task), so none of them is let
        # go while any of those values lives
        hosts = [self.records[o] for o in dict.fromkeys(outer) if o in self.records]
        if not hosts:
            # we stop borrowing only what we hold no other way: a record we keep for
            # another reason tells the owner when it goes
            unheld = tuple(i for i in inner if i not in self.records)
            if unheld:
                out.append(RefuseBorrow(unheld, owner))
            return
        for i in inner:
            rec = self.records.get(i)
            if rec is None:
                rec = self.records[i] = self._record(owner, owner == self.address)
            rec.local += len(hosts)
        for host in hosts:
            host.held = host.held + inner

    def _owner_death(self, owner: str) -> str:
        for address, prefix, why in self.dead_owners:
            if owner == address or (prefix and owner.startswith(prefix)):
                return why
        return ""

    def _read_failed(self, oid: bytes, out: list[Action]) -> None:
        rec = self.records.get(oid)
        if rec is None or rec.owned:
            out.append(Verdict(oid, False, ""))
            return
        why = self._owner_death(rec.owner)
        if why:
            out.append(Verdict(oid, True, why))
            return
        waiting = self.probing.setdefault(rec.owner, set())
        if not waiting:
            out.append(ProbeOwner(rec.owner))
        waiting.add(oid)

    def _owner_node_died(self, address: str, prefix: str, why: str, out: list[Action]) -> None:
        if prefix:  # the owners we know of there stay dead by address (see `_node_back`)
            known = {rec.owner for rec in self.records.copy().values()
                     if not rec.owned and rec.owner.startswith(prefix)}
            self.dead_owners.extend((owner, "", why) for owner in sorted(known))
        self.dead_owners.append((address, prefix, why))
        for owner in sorted(self.probing):
            if owner == address or (prefix and owner.startswith(prefix)):
                for oid in sorted(self.probing.pop(owner)):
                    out.append(Verdict(oid, True, why))
        def dead(o: str) -> bool:
            return o == address or bool(prefix and o.startswith(prefix))

        for token, (_, left) in list(self.lends.items()):  # no owner will settle them now
            ended = tuple(i for i in left if i in self.records and dead(self.records[i].owner))
            if ended:
                self._end_lend(token, ended, out)
        self._answers_of_dead_owners(dead, out)
        for oid, rec in self.records.copy().items():  # (see _borrower_gone)
            if not rec.owned and dead(rec.owner):
                out.append(FailBorrowed(oid, why))

    def _node_back(self, e: NodeBack, out: list[Action]) -> None:
        """A node reported dead answers again: processes under its prefix are new ones
        (those it had then it killed), except the ones we knew of, gone by address."""
        self.gone_prefixes.discard(e.prefix)
        self.dead_owners = [(a, p, why) for a, p, why in self.dead_owners if p != e.prefix]

    # -- checks and history --------------------------------------------------------------
    def validate(self) -> None:
        """Check the invariants; AssertionError naming the object and its story if broken."""
        for oid, rec in self.records.items():
            assert rec.in_use(), f"{oid.hex()} is tracked but unused\n{self.story(oid)}"
            assert rec.local >= 0 and rec.submitted >= 0, \
                f"{oid.hex()} has a negative count\n{self.story(oid)}"
            assert rec.owned == (rec.owner == self.address), f"{oid.hex()} owner mixed up"
            assert rec.lent >= 0, f"{oid.hex()} has a negative lend count\n{self.story(oid)}"
        lent: dict[bytes, int] = {}
        for token, (_, left) in self.lends.items():
            assert left, f"an empty lend {token.hex()}"
            for oid in left:
                lent[oid] = lent.get(oid, 0) + 1
        for oid, rec in self.records.items():
            assert rec.lent == lent.get(oid, 0), \
                f"{oid.hex()} lent {rec.lent} times, {lent.get(oid, 0)} open lends\n{self.story(oid)}"
        self._check_lends()
        for key, ids in self.held_args.items():
            for oid in ids:
                assert oid in self.records and self.records[oid].submitted > 0, \
                    f"{oid.hex()} held for actor {key.hex()} is not counted\n{self.story(oid)}"
        for owner, oids in self.probing.items():
            assert oids, f"an empty probe of {owner}"
            assert not self._owner_death(owner), f"probing {owner}, known dead"

    def story(self, object_id: bytes) -> str:
        """The logged events and actions that concern `object_id`, oldest first."""
        lines = []
        for entry in self.log:
            event: Event
            actions: tuple[Action, ...]
            if entry[0] == "Freed":  # remove_local's entry for an object it freed
                event, actions = RemoveLocal(entry[1]), (Free(entry[1], entry[2], entry[3], ()),)
            elif isinstance(entry[0], str):  # a fast path's entry
                event, actions = _FAST_EVENTS[entry[0]](*entry[1:]), ()
            else:
                event, actions = entry
            if _mentions(event, object_id) or any(_mentions(a, object_id) for a in actions):
                lines.append(f"{event!r} -> {list(actions)!r}")
        return "\n".join(lines) or f"(no events about {object_id.hex()})"


_NOTHING: list[Action] = []  # returned by a fast path with nothing to do (never mutated)
# A fast path logs its event's name, not its class: a tuple of strings and bytes only is
# untracked by the garbage collector, which then skips the log's 10,000 entries.
_FAST_EVENTS: dict[str, Any] = {"AddLocal": AddLocal, "RemoveLocal": RemoveLocal,
                                 "AddSubmitted": AddSubmitted,
                                 "RemoveSubmitted": RemoveSubmitted}


def _mentions(item: Event | Action, object_id: bytes) -> bool:
    for name in ("object_id", "object_ids", "outer", "inner", "held"):
        value = getattr(item, name, None)
        if value == object_id or (isinstance(value, tuple) and object_id in value):
            return True
    return False


_RULES = {
    AddLocal: Ownership._add_local, RemoveLocal: Ownership._remove_local,
    AddSubmitted: Ownership._add_submitted, RemoveSubmitted: Ownership._remove_submitted,
    AddBorrower: Ownership._add_borrower, RemoveBorrower: Ownership._remove_borrower,
    BorrowerGone: Ownership._borrower_gone, Escaped: Ownership._escaped,
    HoldArgs: Ownership._hold_args, ReleaseArgs: Ownership._release_args,
    NodeBack: Ownership._node_back,
    HoldContained: Ownership._hold_contained, HoldBorrowed: Ownership._on_hold_borrowed,
    ReadFailed: Ownership._on_read_failed, OwnerNodeDied: Ownership._on_owner_node_died,
    OwnerDied: Ownership._on_owner_died,
    OwnerAnswered: Ownership._owner_answered, ProbeTimedOut: Ownership._probe_timed_out,
    Lend: Ownership._lend, LendDone: Ownership._lend_done, TakeReturned: Ownership._take_returned,
    HandedOff: Ownership._handed_off, KeepBorrowed: Ownership._keep_borrowed,
    BorrowNote: Ownership._borrow_note, NoteAcked: Ownership._note_acked,
    ReadBorrowed: Ownership._read_borrowed, AskAgain: Ownership._ask_again,
}
