"""What a worker does about the refs in its answers: those inside a task's returns (or inside
the exception it raised) are held for the caller until it takes them over, and borrowed
arguments still held when the work ends are reported to the caller that gave them.

Kept apart from `executor` (which decides when each applies) so that module stays about
running work. The rules are the ownership core's; see `zmesh.runtime.owner.lending`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from zmesh.protocol.messages import runtime as m
from zmesh.runtime.worker.outcomes import error_value

__all__ = ["ReturnRefs"]

_NO_LENT: list[m.Lent] = []  # (never mutated)


def _held(rec: Any) -> bool:
    """Whether this process still holds a ref (a lend alone is handed over to the caller)."""
    return bool(rec.local or rec.submitted or rec.borrowers or rec.escaped)


class ReturnRefs:
    """Per worker: the refs each answer carries, until its TaskResult is made."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self._contained: dict[bytes, list[bytes]] = {}  # task id -> our refs in its returns
        self._lent: dict[bytes, list[m.Lent]] = {}  # task id -> others' refs in its returns

    def hand_over(self, task_id: bytes, attempt: int, owner: str,
                  nested_of: list[tuple[int, list[Any]]], args: Sequence[Any] = ()) -> None:
        """Refs inside returns (by return index): the caller holds them while the return
        lives: ours it borrows from us, others' we lend it (while the result still holds
        them: it lets go of them only after this). Of those, the refs it gave us as
        arguments it holds anyway until it has the answer: we keep them until it settles;
        the others their owner keeps for it once told (the answer waits for that: then no
        death of ours frees them under the caller)."""
        mine: list[bytes] = []
        lent: list[m.Lent] = []
        me = self.client.address
        for i, nested in nested_of:
            for r in nested:
                if r.owner == me:
                    mine.append(r.id)
                else:
                    lent.append(m.Lent(index=i, object_id=r.id, owner=r.owner))
        if mine:  # the caller borrows them (it frees them with the value it got)
            self.client.objects.add_borrower(mine, owner)
            self._contained[task_id] = mine
        if lent:  # kept for the caller until it took them over
            given = {r.id for r in args}
            mine_too = [x for x in lent if x.object_id in given]
            if mine_too:
                self.client.lending.lend(task_id, attempt, mine_too, owner, note=False)
            if len(mine_too) < len(lent):
                self.client.lending.lend(task_id, attempt,
                                         [x for x in lent if x.object_id not in given], owner)
            self._lent[task_id] = lent

    def error_returns(self, task_id: bytes, attempt: int, owner: str, name: str,
                      exc: BaseException, n: int, pid: int, args: Sequence[Any] = ()
                      ) -> list[m.Value]:
        """The error value of every return; refs the error holds are handed over to the
        caller as a return value's are (not pinned here for good)."""
        refs: list[Any] = []
        value = error_value(name, exc, pid, refs)
        if refs:
            self.hand_over(task_id, attempt, owner, [(i, refs) for i in range(n)], args)
        return [value] * n

    def pop(self, task_id: bytes) -> tuple[list[bytes], list[m.Lent]]:
        """(our refs, others' refs) inside the answer of `task_id`, for its TaskResult."""
        return self._contained.pop(task_id, []), self._lent.pop(task_id, _NO_LENT)

    def register_args(self, refs: list[Any], caller: str, token: bytes,
                      wait: bool = False) -> None:
        """An actor call starts with these argument refs: tell the owners of the ones
        neither we nor the caller own that we borrow them (`KeepBorrowed` of the call's lend
        `token`), not only when the call ends: the caller may die meanwhile (an actor does
        not die with it), and its owner would free them under us. `wait`: until they
        acknowledged (an owner that had freed one says so: reads of it then fail with
        ObjectLostError, never a value); without it (an async actor's loop) any read of
        ours still reaches the owner after the note (one connection). The call's answer
        waits for the acknowledgement if it still holds one (`still_held`)."""
        me = self.client.address
        theirs = tuple({r.id for r in refs if r.owner != me and r.owner != caller})
        if theirs:
            self.client.lending.keep(token, theirs)
            if wait:
                self.client.lending.wait_noted(token)

    def still_held(self, refs: list[Any], caller: str, token: bytes) -> tuple[list[bytes], bool]:
        """The borrowed argument refs we still hold now that the work is done (in state, in
        tasks we passed them to, ...): (those the caller owns, which it keeps for us until we
        let go, whether the answer (lend `token`) waits: the owners of the others are told
        we borrow them ourselves (`KeepBorrowed`), and the caller lets go of its own once
        it has the answer)."""
        me = self.client.address
        ids = {r.id for r in refs if r.owner != me}
        refs.clear()
        objects = self.client.objects
        with objects.lock:
            entries = objects.entries
            held = [oid for oid in ids if oid in entries and _held(entries[oid])]
            theirs = tuple(oid for oid in held if entries[oid].owner != caller)
            if theirs:
                self.client.lending.keep(token, theirs)
                waits = token in objects.core.awaiting
            else:
                waits = False
        return [oid for oid in held if oid not in theirs], waits
