"""The ownership core's hand-off of borrowed refs that tasks return (`Lend`, `BorrowNote`,
`TakeReturned`, `HandedOff`, `LendDone`), on several cores wired by FIFO channels (one per
pair, as one connection is) whose messages hypothesis delivers in any order across channels,
with any of the processes but the owner dying at any point: a dead process's messages still
on their way are delivered or lost (a lost one takes every later one on its channel with
it), and each survivor hears of the death at a moment of its own.

Safety: the owner never frees the object while a live process still holds a ref to it (a
record of it, counted for more than a lend), in any interleaving, with repeated answers, refusals and deaths. Liveness:
once every ref is dropped and every message delivered, nothing is tracked anywhere alive."""

from __future__ import annotations

from collections import deque
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from zmesh.core.ownership import (
    AckNote,
    AddBorrower,
    AddLocal,
    AddSubmitted,
    AskAgain,
    AskBorrower,
    BorrowerGone,
    BorrowNote,
    Free,
    HandedOff,
    HandOff,
    HoldArgs,
    KeepBorrowed,
    Lend,
    LendDone,
    LostBorrowed,
    NoteAcked,
    NoteBorrow,
    Ownership,
    ReleaseArgs,
    ReleaseLender,
    RemoveBorrower,
    RemoveLocal,
    RemoveSubmitted,
    SendAnswer,
    TakeReturned,
)
from zmesh.core.ownership_lending import LIVE_LENDER_TICKS

X = b"x" * 4
OWNER, C, W1, W2 = "owner", "caller", "w1", "w2"
NAMES = (OWNER, C, W1, W2)
MORTAL = (C, W1, W2)  # (the owner's death loses the object: another story)


class Mesh:
    """Ownership cores of four processes; OWNER owns X, and W1 borrows it (registered).
    Messages: ("result", R, token) lender -> caller; ("note", token, ids, outers, borrower,
    seq) lender -> owner, ("ack", token, seq) back; ("handoff", ids, borrower, lender, token, take)
    -> owner; ("settled", token, ids) -> lender; ("ask", token, ids, outers, lender) owner
    -> borrower; ("remove", ids, borrower); ("gone", name) from "mem" (a death heard);
    ("task", tid, keep, outer) giver -> runner (X as an argument), ("task_done", tid,
    borrowed, outer or b"", token) back, ("failed", tid) from "mem" (the runner died).
    An ask, a hand-off answering one (tagged "asked") or one of a lend the owner keeps
    (noted) may be lost; an ask or a hand-off
    may come twice; the owner asks again on its timer (`AskAgain`). ("ctor", key) giver
    -> runner: an actor `key` made with X as a constructor argument (the giver holds it,
    `HoldArgs`; the runner keeps a ref for the actor's life, registered nowhere; a restart
    drops it and reads it again), ("actor_dead", key) from "mem" -> giver (`ReleaseArgs`).
    A "task" may be an actor call (`call`): the actor does not die with its giver; it
    registers for X as the call starts (`KeepBorrowed`) and runs it once the owner answered
    (X is of no use to it before); an owner that had freed X says so, and the actor's X is
    then lost (`LostBorrowed`: its reads fail), not held."""

    def __init__(self) -> None:
        self.cores = {n: Ownership(n) for n in NAMES}
        self.chan: dict[tuple[str, str], deque[tuple[Any, ...]]] = {}
        self.freed = False  # the owner freed X
        self.dead: set[str] = set()
        self.values: set[tuple[str, bytes]] = set()  # returns whose result came (readable)
        self.outers: dict[bytes, str] = {}  # return id -> its owner (the caller)
        self.parked: dict[tuple[str, bytes], list[tuple[str, tuple[Any, ...]]]] = {}
        self.tasks: dict[bytes, tuple[str, str, bool, bytes]] = {}  # running: giver, runner..
        self.answers: dict[bytes, tuple[str, str]] = {}  # answered, not yet delivered
        self.n = 0
        self.asked = False  # delivering an ask: a hand-off sent now answers it
        self.actors: dict[bytes, tuple[str, str, bool]] = {}  # key -> giver, runner, up
        self.actor_calls: set[bytes] = set()  # the tasks that are actor calls
        self.starting: dict[bytes, tuple[str, str, bool, bytes]] = {}  # calls not yet run
        self.lost: set[str] = set()  # processes told their X is lost (freed before they
        # registered): their reads of it fail, they hold nothing
        self.false_dead: set[str] = set()  # taken for dead by the others, yet alive
        self.handle(OWNER, AddLocal(X, OWNER))
        self.handle(OWNER, AddBorrower((X,), W1))
        self.handle(W1, AddLocal(X, OWNER))

    # -- wiring (what the shells do) --------------------------------------------------------
    def send(self, src: str, dst: str, msg: tuple[Any, ...]) -> None:
        if src in self.dead or dst in self.dead:
            return
        self.chan.setdefault((src, dst), deque()).append(msg)

    def handle(self, name: str, event: Any) -> None:
        if name in self.dead:
            return
        core = self.cores[name]
        for action in core.handle(event):
            match action:
                case Free(oid, owner, owned):
                    if oid == X and owned:
                        self.freed = True
                    elif oid == X:
                        self.send(name, owner, ("remove", (oid,), name))
                case HandOff(owner, ids, lender, token, take):
                    self.send(name, owner, ("handoff", ids, name, lender, token, take,
                                            "asked" if self.asked else ""))
                case ReleaseLender(lender, token, ids):
                    self.send(name, lender, ("settled", token, ids))
                case NoteBorrow(owner, token, ids, outers, borrower, seq):
                    self.send(name, owner, ("note", token, ids, outers, borrower, seq))
                case AckNote(lender, token, seq, lost):
                    self.send(name, lender, ("ack", token, seq, lost))
                case SendAnswer(token):
                    for dst, msg in self.parked.pop((name, token), []):
                        self.send(name, dst, msg)
                    if token[1:] in self.starting:  # its registration answered: it runs
                        self.tasks[token[1:]] = self.starting.pop(token[1:])
                case LostBorrowed(oid):
                    assert oid == X
                    self.lost.add(name)
                case AskBorrower(borrower, token, ids, outers, lender):
                    self.send(name, borrower, ("ask", token, ids, outers, lender))
                case _:
                    raise AssertionError(f"unexpected {action!r}")
        core.validate()
        self.check()

    def answer(self, src: str, dst: str, token: bytes, msg: tuple[Any, ...]) -> None:
        """`src` sends an answer of lend `token`, held back while its notes are unanswered."""
        if token in self.cores[src].awaiting:
            self.parked.setdefault((src, token), []).append((dst, msg))
        else:
            self.send(src, dst, msg)

    def deliver(self, key: tuple[str, str]) -> None:
        src, dst = key
        msg = self.chan[key].popleft()
        if not self.chan[key]:
            del self.chan[key]
        kind = msg[0]
        if kind == "result":
            _, outer, token = msg
            if src in self.false_dead and self.freed:  # a ref handed on by one taken for
                # dead after its owner freed X (its note came after the free: nothing to
                # keep): the owner answers every read of it with ObjectLostError, like the
                # lender's own; the taker holds a lost ref, not a freed value
                self.lost.add(dst)
            self.handle(dst, TakeReturned(outer, (X,), OWNER, src, token))
            self.values.add((dst, outer))
        elif kind == "handoff":
            _, ids, borrower, lender, token, take, _ = msg
            self.handle(dst, HandedOff(ids, borrower, lender, token, take))
        elif kind == "settled":
            self.handle(dst, LendDone(msg[1], msg[2]))
        elif kind == "remove":
            self.handle(dst, RemoveBorrower(msg[1], msg[2]))
        elif kind == "note":
            _, token, ids, outers, borrower, seq = msg
            self.handle(dst, BorrowNote(token, ids, outers, borrower, src, seq))
        elif kind == "ack":
            self.handle(dst, NoteAcked(msg[1], msg[2], src, msg[3]))
        elif kind == "ask":  # as the shell does: per return, as if the answer had come
            _, token, ids, outers, lender = msg
            self.asked = True
            for oid, outer in zip(ids, outers, strict=True):
                self.handle(dst, TakeReturned(outer, (oid,), src, lender, token))
            self.asked = False
        elif kind == "gone":
            self.handle(dst, BorrowerGone(msg[1]))
        elif kind == "task":  # X arrives as an argument (a ref in the runner)
            _, tid, keep, outer = msg
            if src in self.dead and tid not in self.actor_calls:  # (a node runs nothing
                return  # for an owner that died; an actor runs what reached it)
            if src in self.false_dead and tid not in self.actor_calls:
                self.send("mem", src, ("failed", tid))  # (nor for one taken for dead)
                return
            if tid in self.actor_calls and src != OWNER:  # (the shell's register_args:
                # its X is of no use until the owner answered)
                self.starting[tid] = (src, dst, keep, outer)
                self.handle(dst, AddLocal(X, OWNER))
                self.handle(dst, KeepBorrowed(b"k" + tid, (X,)))
                if tid in self.starting and b"k" + tid not in self.cores[dst].awaiting:
                    self.tasks[tid] = self.starting.pop(tid)  # (registered already)
                return
            self.handle(dst, AddLocal(X, OWNER))
            self.tasks[tid] = (src, dst, keep, outer)
        elif kind == "task_done":  # (the caller's shell: the returns first, then the args)
            _, tid, borrowed, outer, token = msg
            self.answers.pop(tid, None)
            if outer:
                self.handle(dst, TakeReturned(outer, (X,), OWNER, src, token))
                self.values.add((dst, outer))
            if borrowed:
                self.handle(dst, AddBorrower((X,), src))
            self.handle(dst, RemoveSubmitted((X,)))
        elif kind == "failed":
            self.handle(dst, RemoveSubmitted((X,)))
        elif kind == "ctor":  # the actor (re)starts: its constructor reads X
            key = msg[1]
            if key in self.actors and not self.actors[key][2]:
                giver, runner, _ = self.actors[key]
                self.handle(dst, AddLocal(X, OWNER))
                self.actors[key] = (giver, runner, True)
        elif kind == "actor_dead":
            self.handle(dst, ReleaseArgs(msg[1]))

    def check(self) -> None:
        if self.freed:
            for name in NAMES:
                rec = self.cores[name].records.get(X)
                # (a record only lent keeps nothing for this process: it waits for news; an
                # actor call's X is of no use before its registration was answered)
                held = rec is not None and bool(rec.local > self._starting(name)
                                                or rec.submitted or rec.borrowers
                                                or rec.escaped)
                # (one taken for dead that lives on reads a clear error: never the value)
                assert name in self.dead or name in self.lost or name in self.false_dead \
                    or not held, \
                    f"freed by its owner, yet {name} holds it\n" + self.cores[name].story(X)

    # -- the program's steps -----------------------------------------------------------------
    def ret(self, src: str, dst: str, twice: bool) -> None:
        """`src` returns X inside a new return of `dst`'s (it must hold a ref to X)."""
        if src in self.dead or dst in self.dead:
            return
        rec = self.cores[src].records.get(X)
        if src in (dst, OWNER) or rec is None or rec.local <= 0:
            return
        self.n += 1
        outer = b"r%d" % self.n
        self.outers[outer] = dst
        self.handle(dst, AddLocal(outer, dst))
        token = b"t%d" % self.n
        self.handle(src, Lend(token, (X,), dst, (outer,)))
        self.answer(src, dst, token, ("result", outer, token))
        if twice:  # a repeated answer (a resend)
            self.answer(src, dst, token, ("result", outer, token))

    def give(self, src: str, dst: str, keep: bool, actor: bool = False) -> None:
        """`src` passes X as an argument of a task `dst` runs (`keep`: it keeps X after;
        `actor`: an actor call)."""
        if src in self.dead or dst in self.dead or src == dst or dst == OWNER:
            return
        rec = self.cores[src].records.get(X)
        if rec is None or rec.local <= 0:
            return
        self.n += 1
        tid, outer = b"a%d" % self.n, b"r%d" % self.n
        if actor:
            self.actor_calls.add(tid)
        self.outers[outer] = src
        self.handle(src, AddLocal(outer, src))
        self.handle(src, AddSubmitted((X,)))
        self.send(src, dst, ("task", tid, keep, outer))

    def finish(self, k: int, back: bool) -> None:
        """A running task ends (`back`: it returns its argument X inside its return)."""
        live = sorted(t for t, v in self.tasks.items() if v[1] not in self.dead)
        if not live:
            return
        tid = live[k % len(live)]
        giver, runner, keep, outer = self.tasks.pop(tid)
        token = b"k" + tid
        if keep:
            self.handle(runner, AddLocal(X, OWNER))  # kept in its state
        if back:  # the giver holds it until it has the answer: kept until it settles
            self.handle(runner, Lend(token, (X,), giver, (outer,), note=False))
        self.handle(runner, RemoveLocal(X))  # the argument's ref goes
        rec = self.cores[runner].records.get(X)
        held = rec is not None and bool(rec.local or rec.submitted or rec.borrowers)
        if held and giver != OWNER:  # (the shell's still_held)
            self.handle(runner, KeepBorrowed(token, (X,)))
        self.answers[tid] = (runner, giver)
        self.answer(runner, giver, token,
                    ("task_done", tid, held and giver == OWNER, outer if back else b"", token))

    def kill(self, name: str, k: int) -> None:
        """`name` dies: what it sent is delivered or lost (a prefix of each channel stays,
        by `k`), what is sent to it is lost; each survivor hears of it later, and the
        caller of a task it ran hears the task failed, unless its answer is on its way."""
        if name in self.dead:
            return
        for j, key in enumerate(sorted(self.chan)):
            src, dst = key
            if dst == name:
                for msg in self.chan[key]:
                    if msg[0] == "task":
                        self.send("mem", src, ("failed", msg[1]))
                del self.chan[key]
            elif src == name:
                q = self.chan[key]
                keep = (k + 7 * j) % (len(q) + 1)
                while len(q) > keep:
                    q.pop()
                if not q:
                    del self.chan[key]
        self.dead.add(name)
        # a dead owner's tasks die with it (their workers are killed, as in Ray), running
        # or answered with the answer not yet delivered (a worker that kept an argument
        # may not be registered yet: only its caller kept the object for it)
        orphans = sorted({v[1] for t, v in self.tasks.items()
                          if v[0] == name and t not in self.actor_calls}
                         | {r for t, (r, g) in self.answers.items()
                            if g == name and t not in self.actor_calls}
                         | {r for g, r, _ in self.actors.values() if g == name})
        for key, (giver, runner, _) in sorted(self.actors.items()):
            if runner == name:  # the actor dies with its process: its creator hears
                del self.actors[key]
                self.send("mem", giver, ("actor_dead", key))
        for tid in [t for t, v in self.tasks.items() if v[1] == name]:
            self.send("mem", self.tasks.pop(tid)[0], ("failed", tid))
        for tid in [t for t, v in self.starting.items() if v[1] == name]:
            self.send("mem", self.starting.pop(tid)[0], ("failed", tid))
        for tid, (runner, giver) in list(self.answers.items()):
            if runner == name and not any(msg[0] == "task_done" and msg[1] == tid
                                          for msg in self.chan.get((name, giver), ())):
                del self.answers[tid]
                self.send("mem", giver, ("failed", tid))
        for other in NAMES:
            self.send("mem", other, ("gone", name))
        for runner in orphans:
            self.kill(runner, k)

    def false_kill(self, name: str) -> None:
        """`name` is taken for dead (paused, partitioned) but lives on: every other process
        hears of its death at a moment of its own, and what dies with it in a real death
        (the plain tasks and the actors it started: their nodes kill them) dies; the tasks
        and actors it runs fail for their givers; its messages keep flowing both ways."""
        if name in self.dead or name in self.false_dead:
            return
        self.false_dead.add(name)
        orphans = sorted({v[1] for t, v in self.tasks.items()
                          if v[0] == name and t not in self.actor_calls}
                         | {r for t, (r, g) in self.answers.items()
                            if g == name and t not in self.actor_calls}
                         | {r for g, r, _ in self.actors.values() if g == name})
        for tid in [t for t, v in self.tasks.items() if v[1] == name]:
            self.send("mem", self.tasks.pop(tid)[0], ("failed", tid))
        for tid in [t for t, v in self.starting.items() if v[1] == name]:
            self.send("mem", self.starting.pop(tid)[0], ("failed", tid))
        for key, (giver, runner, _) in sorted(self.actors.items()):
            if runner == name:
                del self.actors[key]
                self.send("mem", giver, ("actor_dead", key))
        for other in NAMES:
            if other != name:
                self.send("mem", other, ("gone", name))
        for runner in orphans:
            if runner != name:
                self.kill(runner, 0)

    def read(self, name: str, k: int) -> None:
        """`name` reads one of its returns whose value came: a ref to X in this process."""
        if name in self.dead:
            return
        mine = sorted(o for (n, o) in self.values if n == name and o in self.cores[name].records)
        if mine:
            self.handle(name, AddLocal(X, OWNER))

    def drop_local(self, name: str) -> None:
        if name in self.dead:
            return
        rec = self.cores[name].records.get(X)
        if rec is not None and rec.local > len(self._hosts(name)) + self._running(name) + \
                self._ctor_refs(name):
            self.handle(name, RemoveLocal(X))

    def _running(self, name: str) -> int:
        """The tasks `name` runs with X as an argument (each holds a ref)."""
        return sum(1 for v in self.tasks.values() if v[1] == name) + self._starting(name)

    def _starting(self, name: str) -> int:
        """The actor calls `name` got X with that wait for its registration."""
        return sum(1 for v in self.starting.values() if v[1] == name)

    def _ctor_refs(self, name: str) -> int:
        """The actors running in `name` whose constructor holds a ref to X."""
        return sum(1 for _, r, up in self.actors.values() if r == name and up)

    def _hosts(self, name: str) -> list[bytes]:
        """The returns of `name` whose value holds one of its counts of X."""
        return [o for o, r in self.cores[name].records.items() for h in r.held if h == X]

    def drop_outer(self, name: str, k: int) -> None:
        if name in self.dead:
            return
        mine = sorted(o for o, n in self.outers.items() if n == name
                      and o in self.cores[name].records)
        if mine:
            self.handle(name, RemoveLocal(mine[k % len(mine)]))

    def renote(self, k: int) -> None:
        """A held-back answer's notes are sent again (the shell's `_overdue`)."""
        waiting = sorted((n, t) for (n, t) in self.parked if n not in self.dead)
        if waiting:
            name, token = waiting[k % len(waiting)]
            for note in self.cores[name].awaiting.get(token, {}).values():
                self.send(name, note.owner, ("note", note.token, note.object_ids, note.outers,
                                             note.borrower, note.seq))

    def make_actor(self, src: str, dst: str) -> None:
        """`src` makes an actor that runs in `dst` with X as a constructor argument."""
        if src in self.dead or dst in self.dead or dst in (src, OWNER):
            return
        rec = self.cores[src].records.get(X)
        if rec is None or rec.local <= 0:
            return
        self.n += 1
        key = b"c%d" % self.n
        self.actors[key] = (src, dst, False)
        self.handle(src, HoldArgs(key, (X,)))
        self.send(src, dst, ("ctor", key))

    def restart(self, k: int, end: bool) -> None:
        """An actor restarts (its ref goes; the node sends the spec again: modelled in the
        same process) or, `end`, is dead for good (killed, out of restarts): its process
        dies (what it held with it) and its creator hears of it."""
        up = sorted(key for key, v in self.actors.items() if v[2])
        if not up:
            return
        key = up[k % len(up)]
        giver, runner, _ = self.actors[key]
        if end:
            self.kill(runner, k)
            return
        self.actors[key] = (giver, runner, False)
        self.handle(runner, RemoveLocal(X))
        self.send("mem", runner, ("ctor", key))

    def lose(self, k: int, twice: bool) -> None:
        """The next message on a channel is lost (an ask, or a hand-off answering one) or
        comes twice (an ask or any hand-off), as on a lossy link."""
        keys = sorted(key for key, q in self.chan.items() if q[0][0] in ("ask", "handoff"))
        if not keys:
            return
        key = keys[k % len(keys)]
        q = self.chan[key]
        if twice:
            q.insert(1, q[0])
        elif q[0][0] == "ask" or q[0][-1] == "asked" or (
                q[0][0] == "handoff" and q[0][4] in self.cores[OWNER].noted):
            # (a hand-off of a lend the owner keeps: it asks about it again in time, its
            # lender alive or not)
            q.popleft()
            if not q:
                del self.chan[key]

    def reask(self) -> None:
        """The owner's timer: it asks again about dead lenders' open lends (and about live
        lenders' ones open for `LIVE_LENDER_TICKS` asks)."""
        self.handle(OWNER, AskAgain())

    def quiesce(self) -> None:
        while self.chan:
            self.deliver(next(iter(self.chan)))

    def wind_down(self) -> None:
        """Every live ref goes and every message lands: nothing stays tracked anywhere."""
        for _ in range(200):
            self.reask()
            self.quiesce()
            while self.tasks:
                self.finish(0, False)
                self.quiesce()
            while any(up for _, _, up in self.actors.values()):
                self.restart(0, True)
                self.quiesce()
            for name in NAMES:
                if name in self.dead:
                    continue
                core = self.cores[name]
                for oid in sorted(core.records):
                    if oid != X:
                        self.handle(name, RemoveLocal(oid))
                while X in core.records and core.records[X].local > len(self._hosts(name)):
                    self.handle(name, RemoveLocal(X))
            if not self.chan and not self.tasks and not self.actors and not self.starting \
                    and (OWNER in self.dead or not self.cores[OWNER].asks_pending()):
                break  # (an open lend: the owner's timer asks about it in time, even a live
                # lender's after LIVE_LENDER_TICKS; the loop stopped at once before)
        assert self.freed
        for name in NAMES:
            core = self.cores[name]
            assert name in self.dead or not (core.records or core.lends or core.noted
                                             or core.awaiting), \
                (name, core.records, core.lends, core.noted, core.awaiting)
        assert not any(k[0] not in self.dead for k in self.parked), self.parked


_i = st.integers(0, 7)
_STEP = {
    "ret": st.tuples(st.just("ret"), _i, _i, st.booleans()),
    "deliver": st.tuples(st.just("deliver"), st.integers(0, 20)),
    "settle": st.tuples(st.just("settle")),
    "read": st.tuples(st.just("read"), _i),
    "drop_local": st.tuples(st.just("drop_local"), _i),
    "drop_outer": st.tuples(st.just("drop_outer"), _i, _i),
    "kill": st.tuples(st.just("kill"), _i, st.integers(0, 20)),
    "give": st.tuples(st.just("give"), _i, _i, st.booleans()),
    "finish": st.tuples(st.just("finish"), _i, st.booleans()),
    "chain": st.tuples(st.just("chain"), _i, _i, st.booleans(), st.booleans()),
    "call": st.tuples(st.just("call"), _i, _i, st.booleans()),
    "false_kill": st.tuples(st.just("false_kill"), _i),
    "renote": st.tuples(st.just("renote"), _i),
    "lose": st.tuples(st.just("lose"), _i, st.booleans()),
    "actor": st.tuples(st.just("actor"), _i, _i),
    "restart": st.tuples(st.just("restart"), _i, st.booleans()),
    "reask": st.tuples(st.just("reask")),
}


@st.composite
def _programs(draw: Any) -> list[Any]:
    """Steps of any kind, or (half the programs) of a few kinds only, drawn per program
    (swarm testing: a program made of few kinds goes deeper into them)."""
    kinds = sorted(_STEP)
    if draw(st.booleans()):
        kinds = draw(st.lists(st.sampled_from(kinds), min_size=2, unique=True))
    return draw(st.lists(st.one_of([_STEP[k] for k in kinds]), max_size=25))


def _pick(names: list[str], k: int) -> str | None:
    return names[k % len(names)] if names else None


def run_steps(steps: list[Any]) -> Mesh:
    """Run a program; each step's numbers pick among the processes it can apply to now."""
    mesh = Mesh()

    def alive() -> list[str]:
        return [n for n in NAMES if n not in mesh.dead]

    def holders() -> list[str]:  # (that may pass X on: a lost X is not passed on here, nor
        # does one taken for dead start anything new)
        return [n for n in alive() if (r := mesh.cores[n].records.get(X)) is not None
                and r.local > mesh._starting(n) and n not in mesh.lost
                and n not in mesh.false_dead]

    for step in steps:
        kind = step[0]
        if kind == "ret":
            src = _pick([n for n in holders() if n != OWNER], step[1])
            dst = _pick([n for n in alive() if n != src], step[2])
            if src and dst:
                mesh.ret(src, dst, step[3])
        elif kind == "give":
            src = _pick(holders(), step[1])
            dst = _pick([n for n in alive() if n not in (src, OWNER)], step[2])
            if src and dst:
                mesh.give(src, dst, step[3])
        elif kind == "call":  # an actor call: its runner outlives its giver
            src = _pick(holders(), step[1])
            dst = _pick([n for n in alive() if n not in (src, OWNER)], step[2])
            if src and dst:
                mesh.give(src, dst, step[3], actor=True)
        elif kind == "chain":  # a whole task at once: given, run, answered, answer taken
            src = _pick(holders(), step[1])
            dst = _pick([n for n in alive() if n not in (src, OWNER)], step[2])
            if src and dst:
                mesh.give(src, dst, step[3])
                mesh.quiesce()
                live = sorted(t for t, v in mesh.tasks.items() if v[1] not in mesh.dead)
                mine = [t for t in live if mesh.tasks[t][1] == dst]
                if mine:
                    mesh.finish(live.index(mine[-1]), step[4])
                    mesh.quiesce()
        elif kind == "deliver" and mesh.chan:
            keys = sorted(mesh.chan)
            mesh.deliver(keys[step[1] % len(keys)])
        elif kind == "settle":
            mesh.quiesce()
        elif kind == "read":
            name = _pick(sorted({n for n, o in mesh.values if n not in mesh.dead}), step[1])
            if name:
                mesh.read(name, 0)
        elif kind == "drop_local":
            name = _pick(holders(), step[1])
            if name:
                mesh.drop_local(name)
        elif kind == "drop_outer":
            name = _pick(sorted({n for n in mesh.outers.values() if n not in mesh.dead}),
                         step[1])
            if name:
                mesh.drop_outer(name, step[2])
        elif kind == "kill":
            name = _pick([n for n in MORTAL if n not in mesh.dead], step[1])
            if name:
                mesh.kill(name, step[2])
        elif kind == "finish":
            mesh.finish(step[1], step[2])
        elif kind == "renote" and hasattr(mesh, "renote"):
            mesh.renote(step[1])
        elif kind == "lose":
            mesh.lose(step[1], step[2])
        elif kind == "false_kill":
            name = _pick([n for n in MORTAL if n not in mesh.dead], step[1])
            if name:
                mesh.false_kill(name)
        elif kind == "actor":
            src = _pick(holders(), step[1])
            dst = _pick([n for n in alive() if n not in (src, OWNER)], step[2])
            if src and dst:
                mesh.make_actor(src, dst)
        elif kind == "restart":
            mesh.restart(step[1], step[2])
        elif kind == "reask":
            mesh.reask()
    return mesh


@settings(max_examples=3000, deadline=None)
@given(_programs())
# the programs a copy of this model found against the core before notes (kept as cases):
# the lender dies after its answer went, before the caller's hand-off reached the owner
@example([("drop_local", 0), ("ret", 0, 1, False), ("kill", 1, 1)])
# a link of a chain (the caller kept its ref for the worker it gave X to) dies
@example([("drop_local", 0), ("give", 0, 0, True), ("deliver", 0), ("finish", 0, False),
          ("deliver", 0), ("kill", 1, 0)])
# a note sent again after its lender let go of what it registers (found by CI: the owner
# registered the lender anew, for good)
@example([("give", 0, 0, False), ("give", 1, 0, False), ("settle",), ("finish", 1, False),
          ("finish", 0, False), ("renote", 0)])
# the lender dies with its answer on the way (lost), and the owner's ask is lost: asked
# once only, the owner kept X for the caller until the caller died
@example([("ret", 0, 1, False), ("deliver", 0), ("deliver", 0), ("kill", 1, 0),
          ("deliver", 1), ("lose", 0, False)])
# ... and the hand-off is lost while the lender lives: asked about after LIVE_LENDER_TICKS
# (a random draw found it; the model's wind-down stopped before the owner's timer asked)
@example([("ret", 0, 1, False), ("deliver", 0), ("deliver", 0), ("deliver", 0),
          ("lose", 0, False)])
# an actor made with X as a constructor argument keeps it for its life, restarts too
# (before HoldArgs nothing held it for the actor: freed once its creator let go)
@example([("drop_local", 0), ("actor", 0, 0), ("settle",), ("drop_local", 0),
          ("restart", 0, False), ("settle",)])
# an actor call's giver dies while the actor holds X (before, it registered only when the
# call ended: the owner freed X under it)
@example([("call", 1, 0, True), ("settle",), ("kill", 1, 0), ("settle",), ("drop_local", 0)])
# ... and the giver dies, the owner hearing of it first, while the actor's registration is
# on its way: the owner says it freed X, the actor's X is lost (its reads fail), not held
@example([("drop_local", 0), ("call", 0, 0, False), ("deliver", 0), ("kill", 1, 0),
          ("deliver", 2), ("settle",)])
# a lender taken for dead that lives on: its note comes after the owner dropped it, and its
# answer goes (before, the owner kept nothing for the caller: freed under it once the owner
# let go of its own ref)
@example([("ret", 0, 1, False), ("false_kill", 1), ("deliver", 1), ("deliver", 2),
          ("drop_local", 0), ("settle",)])
# a ref that a lender taken for dead hands on after the owner freed X (found by CI at
# c326ca3): the taker's reads fail, as the lender's do
@example([("drop_local", 0), ("false_kill", 0), ("ret", 0, 2, False), ("false_kill", 1)])
def test_no_interleaving_frees_a_held_object_and_everything_goes_at_the_end(steps: list[Any]
                                                                            ) -> None:
    run_steps(steps).wind_down()


def test_a_lender_dying_after_its_answer_went_frees_nothing_under_the_caller() -> None:
    # found by the model above before notes: w1 returned X to the caller and died; the
    # owner heard of it before the caller's hand-off and freed X under the caller
    mesh = Mesh()
    mesh.ret(W1, C, False)
    mesh.drop_local(OWNER)
    for key in ((W1, OWNER), (OWNER, W1), (W1, C)):  # the note, its ack, the answer
        mesh.deliver(key)
    assert (C, OWNER) in mesh.chan  # the caller's hand-off is on its way
    mesh.drop_local(W1)
    mesh.kill(W1, 0)
    mesh.deliver(("mem", OWNER))  # the owner hears first
    assert not mesh.freed and X in mesh.cores[C].records
    mesh.wind_down()


def test_a_lender_dying_before_its_answer_went_leaks_nothing() -> None:
    mesh = Mesh()
    mesh.ret(W1, C, False)
    mesh.drop_local(OWNER)
    mesh.drop_local(W1)
    mesh.deliver((W1, OWNER))  # the note: the owner keeps X for the caller and acknowledges
    mesh.kill(W1, 0)  # before the acknowledgement came: the answer never goes
    mesh.deliver(("mem", OWNER))
    assert mesh.chan[(OWNER, C)][0][0] == "ask"  # the owner asks the caller to settle
    mesh.wind_down()  # (the caller's return holds X until it goes: then it is freed)


# -- the cases one by one ---------------------------------------------------------------------
def test_a_worker_tells_the_owner_before_its_answer_goes_and_then_lets_go() -> None:
    w = Ownership(W1)
    w.handle(AddLocal(X, OWNER))
    out = w.handle(Lend(b"t", (X,), C, (b"r",)))
    assert out == [NoteBorrow(OWNER, b"t", (X,), (b"r",), C, 1)]  # the answer waits
    assert list(w.awaiting) == [b"t"]
    # its own borrow is no longer needed: the owner has the note before any release of ours
    assert w.handle(RemoveLocal(X)) == [Free(X, OWNER, False, ())]
    assert w.handle(NoteAcked(b"x", 1, OWNER)) == []  # (another lend's: nothing)
    assert w.handle(NoteAcked(b"t", 1, C)) == []  # (not from the owner told: nothing)
    assert w.handle(NoteAcked(b"t", 1, OWNER)) == [SendAnswer(b"t")]
    assert w.handle(NoteAcked(b"t", 1, OWNER)) == []  # (a repeated acknowledgement)
    assert not w.awaiting and not w.lends
    w.validate()


def test_the_owner_keeps_a_noted_lend_for_the_caller_until_it_settles_or_dies() -> None:
    o = Ownership(OWNER)
    o.handle(AddLocal(X, OWNER))
    assert o.handle(BorrowNote(b"t", (X,), (b"r",), C, W1, 7)) == [AckNote(W1, b"t", 7)]
    assert o.handle(BorrowNote(b"t", (X,), (b"r",), C, W1, 7)) == [AckNote(W1, b"t", 7)]
    assert o.records[X].lent == 1  # (a repeated note is kept once)
    assert o.handle(RemoveLocal(X)) == []  # kept for the caller
    assert o.handle(BorrowerGone(W1)) == [AskBorrower(C, b"t", (X,), (b"r",), W1)]
    assert o.handle(HandedOff((X,), C, W1, b"t", True)) == []  # (no lender left to release)
    assert o.records[X].borrowers == {C} and not o.lends and not o.noted
    assert o.handle(RemoveBorrower((X,), C)) == [Free(X, OWNER, True, ())]
    # a caller that died takes nothing over
    o.handle(AddLocal(X, OWNER))
    o.handle(BorrowNote(b"u", (X,), (b"r",), "ipc://s2/caller", W2))
    assert o.handle(BorrowerGone("tcp://n2", "ipc://s2/")) == []
    # ... a note from a lender taken for dead: it may live on (paused, partitioned) and
    # answer now: kept for the caller, which is asked to settle at once
    assert o.handle(BorrowNote(b"v", (X,), (b"r",), C, W1)) == [
        AckNote(W1, b"v"), AskBorrower(C, b"v", (X,), (b"r",), W1)]
    assert o.handle(RemoveLocal(X)) == []
    assert o.handle(HandedOff((X,), C, W1, b"v", False)) == [Free(X, OWNER, True, ())]
    assert not o.lends
    o.validate()


def test_a_hand_off_lost_while_its_lender_lives_is_asked_for_after_a_while() -> None:
    # Before, only a dead lender's lends were asked about: a caller's `HandedOff` lost
    # while the lender lived kept X for the caller until the caller died.
    o = Ownership(OWNER)
    o.handle(AddLocal(X, OWNER))
    o.handle(BorrowNote(b"t", (X,), (b"r",), C, W1, 1))
    o.handle(RemoveLocal(X))  # kept for the caller; its hand-off is lost
    for _ in range(LIVE_LENDER_TICKS - 1):
        assert o.handle(AskAgain()) == []  # (the lender's answer may still be on its way)
    ask = AskBorrower(C, b"t", (X,), (b"r",), W1)
    assert o.handle(AskAgain()) == [ask]
    assert o.handle(AskAgain()) == [ask]  # (again while it is open)
    assert o.handle(HandedOff((X,), C, W1, b"t", True)) == []  # (the lender holds nothing)
    assert not o.lends and not o.noted and not o.noted_ticks
    assert o.handle(HandedOff((X,), C, W1, b"t", True)) == [ReleaseLender(W1, b"t", (X,))]
    assert o.records[X].borrowers == {C}  # (a repeated take registers C once)
    assert o.handle(RemoveBorrower((X,), C)) == [Free(X, OWNER, True, ())]
    o.validate()


def test_a_worker_keeps_what_it_lent_until_the_owner_settles_the_lend() -> None:
    # (a lend that tells no owner: a generator's items, which are not held back)
    w = Ownership(W1)
    w.handle(AddLocal(X, OWNER))
    w.handle(Lend(b"t", (X,), C, note=False))
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
        w.handle(Lend(t, (X,), C, note=False))
    w.handle(RemoveLocal(X))
    assert w.handle(LendDone(b"t2", (X,))) == []
    assert w.handle(LendDone(b"t1", (X,))) == []
    assert w.handle(LendDone(b"t3", (X,))) == [Free(X, OWNER, False, ())]
    w.validate()


def test_a_lend_to_a_caller_that_died_ends() -> None:
    w = Ownership(W1)
    w.handle(AddLocal(X, OWNER))
    w.handle(Lend(b"t", (X,), "ipc://s2/caller", note=False))
    w.handle(RemoveLocal(X))
    assert w.handle(BorrowerGone("tcp://n2", "ipc://s2/")) == [Free(X, OWNER, False, ())]
    assert not w.lends


def test_a_lend_whose_owner_died_ends() -> None:
    from zmesh.core.ownership import FailBorrowed, OwnerNodeDied

    w = Ownership(W1)
    w.handle(AddLocal(X, "ipc://s2/owner"))
    w.handle(AddLocal(b"y", "ipc://s2/owner"))
    w.handle(Lend(b"t", (X,), C, note=False))
    w.handle(Lend(b"u", (b"y",), C, (b"r",)))  # its answer waits for the owner's ack
    w.handle(RemoveLocal(X))
    w.handle(RemoveLocal(b"y"))
    out = w.handle(OwnerNodeDied("tcp://n2", "ipc://s2/", "was killed"))
    assert SendAnswer(b"u") in out  # a dead owner acknowledges nothing: it goes
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
def test_a_worker_that_kept_a_borrowed_argument_registers_with_its_owner_first() -> None:
    w = Ownership(W2)
    w.handle(AddLocal(X, OWNER))  # the argument C gave it, kept in the actor's state
    w.handle(AddLocal(b"y", W2))  # (ours: nothing to register)
    out = w.handle(KeepBorrowed(b"t", (X, b"y")))
    assert out == [NoteBorrow(OWNER, b"t", (X,), (), W2, 1)]  # the answer waits for the ack
    assert w.handle(NoteAcked(b"t", 1, OWNER)) == [SendAnswer(b"t")]
    assert w.handle(RemoveLocal(X)) == [Free(X, OWNER, False, ())]  # to the owner alone
    w.validate()


def test_the_owner_registers_a_worker_that_keeps_a_borrowed_ref_itself() -> None:
    o = Ownership(OWNER)
    o.handle(AddLocal(X, OWNER))
    o.handle(AddBorrower((X,), C))
    assert o.handle(BorrowNote(b"t", (X,), (), W2, W2)) == [AckNote(W2, b"t")]
    o.handle(RemoveBorrower((X,), C))  # the caller that gave it lets go (after the answer)
    o.handle(RemoveLocal(X))
    assert o.records[X].borrowers == {W2}  # no chain through the caller: its death is moot
    assert o.handle(BorrowerGone(C)) == []
    assert o.handle(BorrowerGone(W2)) == [Free(X, OWNER, True, ())]


def test_a_chain_link_dying_while_a_later_link_holds_the_ref_frees_nothing() -> None:
    # found by the model before KeepBorrowed: the caller kept its ref for the worker it gave
    # X to (`ReportedBorrow` -> `Record.via`); when the caller died, the owner dropped it
    # and freed X under the worker
    mesh = Mesh()
    mesh.ret(W1, C, False)
    mesh.quiesce()
    mesh.read(C, 0)  # the caller holds X (registered with the owner)
    mesh.give(C, W2, True)
    mesh.quiesce()
    mesh.finish(0, False)  # W2 keeps X in its state
    mesh.quiesce()
    for name in (OWNER, W1, C):  # every other ref goes
        while X in mesh.cores[name].records and mesh.cores[name].records[X].local > \
                len(mesh._hosts(name)):
            mesh.drop_local(name)
    mesh.drop_outer(C, 0)
    mesh.drop_outer(C, 1)
    mesh.quiesce()
    mesh.kill(C, 0)
    mesh.quiesce()
    assert not mesh.freed and X in mesh.cores[W2].records
    mesh.wind_down()


# -- refs read out of a borrowed value -----------------------------------------------------------
def test_a_reader_keeps_a_borrowed_value_until_the_refs_read_out_of_it_are_registered() -> None:
    from zmesh.core.ownership import ReadBorrowed

    p = Ownership(C)
    p.handle(AddLocal(b"v", OWNER))
    p.handle(AddLocal(X, W1))  # read out of v's value (owned by another process)
    p.handle(AddLocal(b"y", C))  # (ours: nothing to register)
    out = p.handle(ReadBorrowed(b"v", (X, b"y")))
    assert len(out) == 1 and isinstance(out[0], NoteBorrow)
    note = out[0]
    assert (note.owner, note.object_ids, note.borrower) == (W1, (X,), C)
    assert p.handle(RemoveLocal(b"v")) == []  # kept until its owner registered us
    p.validate()
    assert p.handle(NoteAcked(note.token, note.seq, W1)) == [Free(b"v", OWNER, False, ())]
    assert not p.reading and not p.lends and not p.awaiting
    p.validate()
    # the owner of what we read died: nothing registers us, the value goes
    p.handle(AddLocal(b"w", OWNER))
    out = p.handle(ReadBorrowed(b"w", (X,)))
    p.handle(RemoveLocal(b"w"))
    from zmesh.core.ownership import OwnerDied
    assert Free(b"w", OWNER, False, ()) in p.handle(OwnerDied(W1, "gone"))
    p.validate()
