"""The ownership core's hand-off of borrowed refs that tasks return (`Lend`, `TakeReturned`,
`HandedOff`, `LendDone`), on several cores wired by FIFO channels (one per pair, as one
connection is) whose messages hypothesis delivers in any order across channels.

Safety: the owner never frees the object while another process still holds a ref to it (a
record of it), in any interleaving, with repeated answers and refusals. Liveness: once every
ref is dropped and every message delivered, nothing is tracked anywhere."""

from __future__ import annotations

from collections import deque
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from zmesh.core.ownership import (
    AddBorrower,
    AddLocal,
    BorrowerGone,
    Free,
    HandedOff,
    HandOff,
    Lend,
    LendDone,
    Ownership,
    ReleaseLender,
    RemoveBorrower,
    RemoveLocal,
    TakeReturned,
)

X = b"x" * 4
OWNER, C, W1, W2 = "owner", "caller", "w1", "w2"
NAMES = (OWNER, C, W1, W2)


class Mesh:
    """Ownership cores of four processes; OWNER owns X, and W1 borrows it (registered).
    Messages: ("result", R, token) lender -> caller; ("handoff", ids, borrower, lender,
    token, take) -> owner; ("settled", token, ids) -> lender; ("remove", ids, borrower)."""

    def __init__(self) -> None:
        self.cores = {n: Ownership(n) for n in NAMES}
        self.chan: dict[tuple[str, str], deque[tuple[Any, ...]]] = {}
        self.freed = False  # the owner freed X
        self.values: set[tuple[str, bytes]] = set()  # returns whose result came (readable)
        self.outers: dict[bytes, str] = {}  # return id -> its owner (the caller)
        self.n = 0
        self.handle(OWNER, AddLocal(X, OWNER))
        self.handle(OWNER, AddBorrower((X,), W1))
        self.handle(W1, AddLocal(X, OWNER))

    # -- wiring (what the shells do) --------------------------------------------------------
    def send(self, src: str, dst: str, msg: tuple[Any, ...]) -> None:
        self.chan.setdefault((src, dst), deque()).append(msg)

    def handle(self, name: str, event: Any) -> None:
        core = self.cores[name]
        for action in core.handle(event):
            match action:
                case Free(oid, owner, owned):
                    if oid == X and owned:
                        self.freed = True
                    elif oid == X:
                        self.send(name, owner, ("remove", (oid,), name))
                case HandOff(owner, ids, lender, token, take):
                    self.send(name, owner, ("handoff", ids, name, lender, token, take))
                case ReleaseLender(lender, token, ids):
                    self.send(name, lender, ("settled", token, ids))
                case _:
                    raise AssertionError(f"unexpected {action!r}")
        core.validate()
        self.check()

    def deliver(self, key: tuple[str, str]) -> None:
        src, dst = key
        msg = self.chan[key].popleft()
        if not self.chan[key]:
            del self.chan[key]
        kind = msg[0]
        if kind == "result":
            _, outer, token = msg
            self.handle(dst, TakeReturned(outer, (X,), OWNER, src, token))
            self.values.add((dst, outer))
        elif kind == "handoff":
            _, ids, borrower, lender, token, take = msg
            self.handle(dst, HandedOff(ids, borrower, lender, token, take))
        elif kind == "settled":
            self.handle(dst, LendDone(msg[1], msg[2]))
        elif kind == "remove":
            self.handle(dst, RemoveBorrower(msg[1], msg[2]))

    def check(self) -> None:
        if self.freed:
            for name in NAMES:
                assert X not in self.cores[name].records, \
                    f"freed by its owner, yet {name} holds it\n" + self.cores[name].story(X)

    # -- the program's steps -----------------------------------------------------------------
    def ret(self, src: str, dst: str, twice: bool) -> None:
        """`src` returns X inside a new return of `dst`'s (it must hold a ref to X)."""
        rec = self.cores[src].records.get(X)
        if src in (dst, OWNER) or rec is None or rec.local <= 0:
            return
        self.n += 1
        outer = b"r%d" % self.n
        self.outers[outer] = dst
        self.handle(dst, AddLocal(outer, dst))
        token = b"t%d" % self.n
        self.handle(src, Lend(token, (X,), dst))
        self.send(src, dst, ("result", outer, token))
        if twice:  # a repeated answer (a resend)
            self.send(src, dst, ("result", outer, token))

    def read(self, name: str, k: int) -> None:
        """`name` reads one of its returns whose value came: a ref to X in this process."""
        mine = sorted(o for (n, o) in self.values if n == name and o in self.cores[name].records)
        if mine:
            self.handle(name, AddLocal(X, OWNER))

    def drop_local(self, name: str) -> None:
        rec = self.cores[name].records.get(X)
        if rec is not None and rec.local > sum(1 for h in self._hosts(name)):
            self.handle(name, RemoveLocal(X))

    def _hosts(self, name: str) -> list[bytes]:
        """The returns of `name` whose value holds one of its counts of X."""
        return [o for o, r in self.cores[name].records.items() for h in r.held if h == X]

    def drop_outer(self, name: str, k: int) -> None:
        mine = sorted(o for o, n in self.outers.items() if n == name
                      and o in self.cores[name].records)
        if mine:
            self.handle(name, RemoveLocal(mine[k % len(mine)]))

    def quiesce(self) -> None:
        while self.chan:
            self.deliver(next(iter(self.chan)))


_steps = st.lists(st.one_of(
    st.tuples(st.just("ret"), st.sampled_from(NAMES), st.sampled_from(NAMES), st.booleans()),
    st.tuples(st.just("deliver"), st.integers(0, 20)),
    st.tuples(st.just("read"), st.sampled_from(NAMES), st.integers(0, 9)),
    st.tuples(st.just("drop_local"), st.sampled_from(NAMES)),
    st.tuples(st.just("drop_outer"), st.sampled_from(NAMES), st.integers(0, 9)),
), max_size=60)


@settings(max_examples=400, deadline=None)
@given(_steps)
def test_no_interleaving_frees_a_held_object_and_everything_goes_at_the_end(steps: list[Any]
                                                                            ) -> None:
    mesh = Mesh()
    for step in steps:
        kind = step[0]
        if kind == "ret":
            mesh.ret(step[1], step[2], step[3])
        elif kind == "deliver" and mesh.chan:
            keys = sorted(mesh.chan)
            mesh.deliver(keys[step[1] % len(keys)])
        elif kind == "read":
            mesh.read(step[1], step[2])
        elif kind == "drop_local":
            mesh.drop_local(step[1])
        elif kind == "drop_outer":
            mesh.drop_outer(step[1], step[2])
    # every ref goes, every message lands: nothing stays tracked anywhere
    for _ in range(200):
        mesh.quiesce()
        for name in NAMES:
            core = mesh.cores[name]
            for oid in sorted(core.records):
                if oid != X:
                    mesh.handle(name, RemoveLocal(oid))
            while X in core.records and core.records[X].local > len(mesh._hosts(name)):
                mesh.handle(name, RemoveLocal(X))
        if not mesh.chan:
            break
    assert mesh.freed
    for name in NAMES:
        core = mesh.cores[name]
        assert not core.records and not core.lends, (name, core.records, core.lends)


# -- the cases one by one ---------------------------------------------------------------------
def test_a_worker_keeps_what_it_lent_until_the_owner_settles_the_lend() -> None:
    w = Ownership(W1)
    w.handle(AddLocal(X, OWNER))
    w.handle(Lend(b"t", (X,), C))
    assert w.handle(RemoveLocal(X)) == []  # the result went; the task's refs are gone
    assert w.records[X].lent == 1
    out = w.handle(LendDone(b"t", (X,)))
    assert out == [Free(X, OWNER, False, ())]  # then it stops borrowing (tells the owner)
    assert w.handle(LendDone(b"t", (X,))) == []  # a repeated answer's settlement: nothing
    w.validate()


def test_the_owner_registers_the_caller_before_it_releases_the_lender() -> None:
    o = Ownership(OWNER)
    o.handle(AddLocal(X, OWNER))
    o.handle(AddBorrower((X,), W1))
    out = o.handle(HandedOff((X,), C, W1, b"t", True))
    assert out == [ReleaseLender(W1, b"t", (X,))]
    assert o.records[X].borrowers == {W1, C}
    o.handle(RemoveBorrower((X,), W1))
    o.handle(RemoveLocal(X))
    assert X in o.records  # the caller still borrows it
    assert o.handle(RemoveBorrower((X,), C)) == [Free(X, OWNER, True, ())]


def test_the_caller_holds_the_ref_while_its_return_lives_and_then_stops_borrowing() -> None:
    c = Ownership(C)
    c.handle(AddLocal(b"r", C))
    out = c.handle(TakeReturned(b"r", (X,), OWNER, W1, b"t"))
    assert out == [HandOff(OWNER, (X,), W1, b"t", True)]
    c.handle(AddLocal(X, OWNER))  # the value read: a ref to X here
    assert c.handle(RemoveLocal(b"r")) == [Free(b"r", C, True, (X,))]  # outer first
    assert c.handle(RemoveLocal(X)) == [Free(X, OWNER, False, ())]  # then the inner
    c.validate()


def test_a_caller_that_dropped_the_return_refuses_through_the_owner() -> None:
    c = Ownership(C)
    out = c.handle(TakeReturned(b"r", (X,), OWNER, W1, b"t"))
    assert out == [HandOff(OWNER, (X,), W1, b"t", False)]
    assert not c.records
    o = Ownership(OWNER)
    o.handle(AddLocal(X, OWNER))
    assert o.handle(HandedOff((X,), C, W1, b"t", False)) == [ReleaseLender(W1, b"t", (X,))]
    assert o.records[X].borrowers is None  # not registered


def test_a_ref_the_caller_owns_is_held_by_the_return_and_settled_by_the_caller() -> None:
    c = Ownership(C)
    c.handle(AddLocal(X, C))
    c.handle(AddBorrower((X,), W1))
    c.handle(AddLocal(b"r", C))
    # it holds them, then settles the worker's lend itself (it is their owner)
    assert c.handle(TakeReturned(b"r", (X,), C, W1, b"t")) == [ReleaseLender(W1, b"t", (X,))]
    c.handle(RemoveLocal(X))
    c.handle(RemoveBorrower((X,), W1))  # the worker's own borrow ends after its result
    assert X in c.records  # the return holds it
    out = c.handle(RemoveLocal(b"r"))
    assert [a.object_id for a in out if isinstance(a, Free)] == [b"r", X]


def test_the_same_ref_lent_by_several_tasks_is_kept_until_each_lend_settles() -> None:
    w = Ownership(W1)
    w.handle(AddLocal(X, OWNER))
    for t in (b"t1", b"t2", b"t3"):
        w.handle(Lend(t, (X,), C))
    w.handle(RemoveLocal(X))
    assert w.handle(LendDone(b"t2", (X,))) == []
    assert w.handle(LendDone(b"t1", (X,))) == []
    assert w.handle(LendDone(b"t3", (X,))) == [Free(X, OWNER, False, ())]
    w.validate()


def test_a_lend_to_a_caller_that_died_ends() -> None:
    w = Ownership(W1)
    w.handle(AddLocal(X, OWNER))
    w.handle(Lend(b"t", (X,), "ipc://s2/caller"))
    w.handle(RemoveLocal(X))
    assert w.handle(BorrowerGone("tcp://n2", "ipc://s2/")) == [Free(X, OWNER, False, ())]
    assert not w.lends


def test_a_lend_whose_owner_died_ends() -> None:
    from zmesh.core.ownership import FailBorrowed, OwnerNodeDied

    w = Ownership(W1)
    w.handle(AddLocal(X, "ipc://s2/owner"))
    w.handle(Lend(b"t", (X,), C))
    w.handle(RemoveLocal(X))
    out = w.handle(OwnerNodeDied("tcp://n2", "ipc://s2/", "was killed"))
    assert Free(X, "ipc://s2/owner", False, ()) in out
    assert not any(isinstance(a, FailBorrowed) for a in out)  # (nothing of it is left)
    assert not w.lends and not w.records


def test_a_ref_handed_up_through_several_levels() -> None:
    # w2 returns X to w1 (a task w1 called), w1 returns it to the caller: each hop hands over
    mesh = Mesh()
    mesh.handle(W2, AddLocal(X, OWNER))  # (w2 got it from w1, registered with the owner)
    mesh.handle(OWNER, AddBorrower((X,), W2))
    mesh.ret(W2, W1, False)
    mesh.handle(W2, RemoveLocal(X))
    mesh.quiesce()
    mesh.read(W1, 0)
    mesh.ret(W1, C, False)
    for _ in range(3):  # w1's task ends: its own refs go
        mesh.drop_local(W1)
    mesh.drop_outer(W1, 0)
    mesh.quiesce()
    assert mesh.cores[OWNER].records[X].borrowers == {C}
    assert X not in mesh.cores[W1].records and X not in mesh.cores[W2].records
    mesh.drop_outer(C, 0)
    mesh.quiesce()
    assert X in mesh.cores[OWNER].records  # the owner's own ref
    mesh.handle(OWNER, RemoveLocal(X))
    assert mesh.freed


def test_a_refusal_does_not_unregister_a_caller_that_holds_the_ref_another_way() -> None:
    from zmesh.core.ownership import HoldBorrowed, RefuseBorrow

    c = Ownership(C)
    c.handle(AddLocal(X, W1))  # a ref to the worker's object it kept from an earlier call
    assert c.handle(HoldBorrowed((b"gone",), (X,), W1)) == []  # no RefuseBorrow for it
    assert c.handle(HoldBorrowed((b"gone",), (b"y",), W1)) == [RefuseBorrow((b"y",), W1)]


# -- a borrower that passed a ref into a task that kept it ---------------------------------------
def test_a_worker_that_kept_a_borrowed_argument_tells_the_caller_that_gave_it() -> None:
    from zmesh.core.ownership import ReportedBorrow

    w = Ownership(W2)
    w.handle(AddLocal(X, OWNER))  # the argument C gave it, kept in the actor's state
    w.handle(ReportedBorrow((X,), C))  # (the task ended: C keeps its ref for it)
    w.handle(ReportedBorrow((X,), C))  # (once per caller)
    assert w.handle(RemoveLocal(X)) == [Free(X, OWNER, False, (), (C,))]
    w.validate()
    assert w.handle(ReportedBorrow((X,), C)) == []  # not tracked: nothing to remember


def test_the_caller_keeps_its_borrowed_ref_while_the_worker_it_gave_it_to_keeps_it() -> None:
    c = Ownership(C)
    c.handle(AddLocal(X, OWNER))
    c.handle(AddBorrower((X,), W2))  # the TaskResult said W2 still holds it
    assert c.handle(RemoveLocal(X)) == []
    c.validate()
    assert c.handle(RemoveBorrower((X,), W2)) == [Free(X, OWNER, False, ())]
