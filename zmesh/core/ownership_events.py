"""The events and actions of the ownership core (`zmesh.core.ownership`): what a process's
refs, tasks, borrowers and owner probes tell the machine, and what it asks its shell to do.

Typed records only, no rules: the shell builds the events and matches the actions
exhaustively, and the machine's module stays about its rules.
"""

from __future__ import annotations

import msgspec

__all__ = [
    "AckNote",
    "Action",
    "AddBorrower",
    "AddLocal",
    "AddSubmitted",
    "AskAgain",
    "AskBorrower",
    "BorrowNote",
    "BorrowerGone",
    "NodeBack",
    "Escaped",
    "Event",
    "FailBorrowed",
    "Free",
    "HandOff",
    "HandedOff",
    "HoldArgs",
    "HoldBorrowed",
    "HoldContained",
    "KeepBorrowed",
    "Lend",
    "LendDone",
    "LostBorrowed",
    "NoteAcked",
    "NoteBorrow",
    "OwnerAnswered",
    "OwnerDied",
    "OwnerNodeDied",
    "ProbeOwner",
    "ProbeTimedOut",
    "ReadBorrowed",
    "ReadFailed",
    "RefuseBorrow",
    "ReleaseLender",
    "ReleaseArgs",
    "RemoveBorrower",
    "RemoveLocal",
    "RemoveSubmitted",
    "SendAnswer",
    "TakeReturned",
    "Verdict",
]


# -- events ---------------------------------------------------------------------------------
class AddLocal(msgspec.Struct):
    """A ref to `object_id` was made in this process (created, received or deserialized)."""

    object_id: bytes
    owner: str


class RemoveLocal(msgspec.Struct):
    """A ref to `object_id` in this process was dropped."""

    object_id: bytes


class AddSubmitted(msgspec.Struct):
    """Tasks that take these objects as arguments were submitted (one count each)."""

    object_ids: tuple[bytes, ...]


class RemoveSubmitted(msgspec.Struct):
    """Those tasks finished (or the values holding the objects were freed)."""

    object_ids: tuple[bytes, ...]


class AddBorrower(msgspec.Struct):
    """Another process holds refs to these (owned) objects."""

    object_ids: tuple[bytes, ...]
    borrower: str


class RemoveBorrower(msgspec.Struct):
    """That process stopped holding them."""

    object_ids: tuple[bytes, ...]
    borrower: str


class BorrowerGone(msgspec.Struct):
    """The process at `address` (or every one with ipc sockets under `prefix`) died: it
    borrows nothing any more."""

    address: str
    prefix: str = ""


class NodeBack(msgspec.Struct):
    """The node whose processes have ipc sockets under `prefix`, reported dead before (a
    `BorrowerGone` and an `OwnerNodeDied` with this prefix), answers again: it killed the
    processes it had then, so later ones under `prefix` are new. The ones we knew of stay
    gone, by address; the rest are borrowers and owners like any others."""

    prefix: str


class HoldArgs(msgspec.Struct):
    """An actor we created (`key`: its id) takes these refs as constructor arguments (at
    the top or inside them): hold them, as a pending task's, while it lives, so that its
    restarts read them again and what it keeps of them lives on (it registered with no
    owner for them). A repeated hold of one key holds nothing more."""

    key: bytes
    object_ids: tuple[bytes, ...]


class ReleaseArgs(msgspec.Struct):
    """The actor `key` is dead for good (killed, out of restarts, its constructor failed):
    let go of what `HoldArgs` held for it (once; a repeat or an unknown key: nothing)."""

    key: bytes


class Escaped(msgspec.Struct):
    """A ref left this process inside a return value: keep the object for its receiver."""

    object_ids: tuple[bytes, ...]


class HoldContained(msgspec.Struct):
    """The value of owned `object_id` holds refs to `inner`: keep them while it lives."""

    object_id: bytes
    inner: tuple[bytes, ...]


class HoldBorrowed(msgspec.Struct):
    """Values `outer` (returns we got) hold `owner`'s objects `inner`: borrow them while
    any of `outer` that we still track lives."""

    outer: tuple[bytes, ...]
    inner: tuple[bytes, ...]
    owner: str


class Lend(msgspec.Struct):
    """We returned refs to `object_ids` (others' objects; `outers[i]`: the return that holds
    `object_ids[i]`) inside the returns of a task to `borrower`. Those `borrower` owns we
    keep until it says it holds them (`LendDone` of `token`); for the others we tell their
    owner first (`NoteBorrow`), and the answer waits for its `NoteAcked` (`SendAnswer`):
    the owner then keeps them for `borrower` whatever becomes of us."""

    token: bytes
    object_ids: tuple[bytes, ...]
    borrower: str
    outers: tuple[bytes, ...] = ()
    note: bool = True  # False: keep them all until their owners settle (no answer waits)


class LendDone(msgspec.Struct):
    """The owner of `object_ids` settled lend `token` (it registered the borrower, or the
    borrower refused): stop keeping them for it. Ids not (or no longer) in it are ignored."""

    token: bytes
    object_ids: tuple[bytes, ...]


class TakeReturned(msgspec.Struct):
    """A result that `lender` sent us holds `owner`'s objects `inner` in our return `outer`:
    keep them while `outer` lives (borrowing them from `owner`, who then ends the lender's
    `Lend` of `token`; if `owner` is us, we end it); if we no longer track `outer`, refuse."""

    outer: bytes
    inner: tuple[bytes, ...]
    owner: str
    lender: str
    token: bytes


class HandedOff(msgspec.Struct):
    """(At the owner) `borrower` took over (`take`) or refused our objects `object_ids` that
    `lender` lent it in `token`: register it if it took them, then end the lend."""

    object_ids: tuple[bytes, ...]
    borrower: str
    lender: str
    token: bytes
    take: bool


class KeepBorrowed(msgspec.Struct):
    """Our work of lend `token` ended and we still hold these borrowed refs its caller gave
    us (owned by neither of us): tell their owners we borrow them ourselves (`NoteBorrow`
    with us as borrower) before the answer goes; after it, the caller lets go of its own.
    An actor sends it as a call starts too (its caller may die while the call runs: it does
    not die with it); refs an owner registered us for already, or that a note of `token`
    is on its way for, are not noted again."""

    token: bytes
    object_ids: tuple[bytes, ...]


class ReadBorrowed(msgspec.Struct):
    """We read the value of `outer` (borrowed) and it holds refs `inner` that we do not
    own: register with their owners as borrowing them ourselves, and keep `outer` until they
    have acknowledged (its value holds them for us until then; our ref to it may go at
    once, and with it the value)."""

    outer: bytes
    inner: tuple[bytes, ...]


class BorrowNote(msgspec.Struct):
    """(At the owner) `lender` is about to hand our objects `object_ids` (in its returns
    `outers`, parallel) to `borrower` in lend `token`: keep them for `borrower` until it
    took them over or refused them (`HandedOff`), or died; if `lender` dies first, ask
    `borrower` to settle (`AskBorrower`). `borrower == lender`: it keeps them itself past
    its work (register it). Acknowledged (`AckNote`): its answer waits for that."""

    token: bytes
    object_ids: tuple[bytes, ...]
    outers: tuple[bytes, ...]
    borrower: str
    lender: str
    seq: int = 0  # the lender's number of the note: a repeated note is acknowledged again


class AskAgain(msgspec.Struct):
    """(At the owner; a timer) ask again the borrowers of the noted lends whose lender
    died and that are still unsettled: an `AskBorrower` or its answer may have been lost
    (a lost one would keep the objects for the borrower until it died)."""


class NoteAcked(msgspec.Struct):
    """`owner` acknowledged our `NoteBorrow` number `seq` of lend `token` (a repeated
    acknowledgement, or one from another process, counts for nothing). `lost`: of a note
    registering us, the objects it did not register us for (it had freed them, or took us
    for dead): our refs to them are lost."""

    token: bytes
    seq: int
    owner: str
    lost: tuple[bytes, ...] = ()


class ReadFailed(msgspec.Struct):
    """Reading the stored copy of `object_id` failed (the copy is gone)."""

    object_id: bytes


class OwnerNodeDied(msgspec.Struct):
    """A node died: owners at `address` or with ipc sockets under `ipc_prefix` died too."""

    address: str
    ipc_prefix: str
    why: str


class OwnerDied(msgspec.Struct):
    """The owner at `owner` (one process) died: seen by its silence while we awaited a value
    it owns. Its objects we borrow fail with `why`."""

    owner: str
    why: str


class OwnerAnswered(msgspec.Struct):
    """`owner` answered a probe: it lives."""

    owner: str


class ProbeTimedOut(msgspec.Struct):
    """`owner` did not answer a probe in time (timer event)."""

    owner: str


Event = (AddLocal | RemoveLocal | AddSubmitted | RemoveSubmitted | AddBorrower | RemoveBorrower
         | BorrowerGone | Escaped | HoldContained | HoldBorrowed | ReadFailed | OwnerNodeDied | OwnerDied
         | OwnerAnswered | ProbeTimedOut | Lend | LendDone | TakeReturned | HandedOff
         | KeepBorrowed | BorrowNote | NoteAcked | ReadBorrowed | AskAgain | HoldArgs
         | ReleaseArgs | NodeBack)


# -- actions --------------------------------------------------------------------------------
class Free(msgspec.Struct):
    """Nothing holds the object any more: free its copies (owned) or tell its owner we stop
    borrowing it; the objects in `held` were borrowed for its value and are released too."""

    object_id: bytes
    owner: str
    owned: bool
    held: tuple[bytes, ...]


class RefuseBorrow(msgspec.Struct):
    """No outer value of a `HoldBorrowed` lives: tell `owner` we borrow none of `inner`."""

    inner: tuple[bytes, ...]
    owner: str


class HandOff(msgspec.Struct):
    """Tell `owner` that we took over (`take`) or refused `object_ids`, which `lender` lent
    us in lend `token` (the owner registers us, then releases the lender: in that order,
    so that no moment has neither of us registered)."""

    owner: str
    object_ids: tuple[bytes, ...]
    lender: str
    token: bytes
    take: bool


class ReleaseLender(msgspec.Struct):
    """(At the owner) tell `lender` that its lend `token` of `object_ids` is settled (we
    registered the borrower, or we are it and hold them, or it refused them)."""

    lender: str
    token: bytes
    object_ids: tuple[bytes, ...]


class NoteBorrow(msgspec.Struct):
    """Tell `owner` that `borrower` is about to get `object_ids` (in our returns `outers`)
    through our lend `token` (or, `borrower` being us, that we keep them past our work):
    the answer of `token` goes once it acknowledged (`SendAnswer`)."""

    owner: str
    token: bytes
    object_ids: tuple[bytes, ...]
    outers: tuple[bytes, ...]
    borrower: str
    seq: int = 0  # our number of it (its acknowledgement names it; sent again if lost)


class SendAnswer(msgspec.Struct):
    """Every owner told of lend `token` acknowledged (or died): its answer may go now."""

    token: bytes


class AckNote(msgspec.Struct):
    """(At the owner) tell `lender` we keep what its lend `token` hands over (note `seq`);
    `lost`: of a note registering the lender itself, what we did not register it for."""

    lender: str
    token: bytes
    seq: int = 0
    lost: tuple[bytes, ...] = ()


class LostBorrowed(msgspec.Struct):
    """Our borrowed `object_id`'s owner did not register us for it (it had freed it when
    our note came, or took us for dead): every read of it fails with `why` from now on."""

    object_id: bytes
    why: str


class AskBorrower(msgspec.Struct):
    """(At the owner) `lender` died before `borrower` settled its lend `token`: ask
    `borrower` to settle it now (it takes `object_ids` over while their returns `outers`
    live, else refuses), as if the answer had come."""

    borrower: str
    token: bytes
    object_ids: tuple[bytes, ...]
    outers: tuple[bytes, ...]
    lender: str


class FailBorrowed(msgspec.Struct):
    """A borrowed object waiting for its value: its owner died, so it never comes."""

    object_id: bytes
    why: str


class ProbeOwner(msgspec.Struct):
    """Ask `owner` whether it lives (and start the probe's timer)."""

    owner: str


class Verdict(msgspec.Struct):
    """What a failed read means: `owner_died` (with `why`) or only the copy was lost."""

    object_id: bytes
    owner_died: bool
    why: str


Action = (Free | RefuseBorrow | FailBorrowed | ProbeOwner | Verdict | HandOff | ReleaseLender
          | NoteBorrow | SendAnswer | AckNote | AskBorrower | LostBorrowed)
