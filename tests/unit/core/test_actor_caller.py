"""The actor caller core against a model actor (a Mailbox per incarnation) on a lossy-by-
restart network: validate() after every step; each incarnation runs the calls in submission
order; and once the actor stays up and the network drains, no call is left waiting (the
renumbering leaves no gap that would stall the new mailbox)."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from zmesh.core.actor_caller import (
    ActorAlive,
    ActorCallerCore,
    ActorDead,
    ActorRestarting,
    Completed,
    Fail,
    Ready,
    Send,
    Submit,
    Track,
)
from zmesh.core.mailbox import Mailbox

AID = b"actor"


class CallerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.core = ActorCallerCore()
        self.n = 0
        self.seq_of: dict[bytes, int] = {}  # task id -> submission order
        self.incarnation = -1
        self.alive = False
        self.dead = False
        self.mailbox: Mailbox[bytes] = Mailbox()
        self.wire: list[tuple[int, int, bytes]] = []  # (incarnation, wire seq, task id)
        self.ran: list[tuple[int, bytes]] = []  # (incarnation, task id) in run order
        self.unready: list[bytes] = []
        self.open: set[bytes] = set()  # submitted, neither completed nor failed
        self.core.handle(Track(AID, max_task_retries=1))

    def step(self, event: object) -> None:
        for action in self.core.handle(event):  # type: ignore[arg-type]
            if isinstance(action, Send):
                assert self.alive and action.address == f"w{self.incarnation}"
                self.wire.append((self.incarnation, action.seq, action.task_id))
            elif isinstance(action, Fail):
                self.open.discard(action.task_id)
        self.core.validate()

    @rule(ready=st.booleans())
    def submit(self, ready: bool) -> None:
        tid = b"t%d" % self.n
        self.seq_of[tid] = self.n
        self.n += 1
        self.open.add(tid)
        if not ready:
            self.unready.append(tid)
        self.step(Submit(AID, tid, ready))

    @rule(data=st.data())
    def args_resolve(self, data: st.DataObject) -> None:
        if self.unready:
            tid = self.unready.pop(data.draw(st.integers(0, len(self.unready) - 1)))
            self.step(Ready(AID, tid))

    @rule(data=st.data())
    def deliver(self, data: st.DataObject) -> None:
        if not self.wire:
            return
        inc, seq, tid = self.wire.pop(data.draw(st.integers(0, len(self.wire) - 1)))
        if inc != self.incarnation or not self.alive:
            return  # sent to a worker that is gone
        for run in self.mailbox.deliver("me", seq, tid):
            self.ran.append((self.incarnation, run))
            if run in self.open:
                self.open.discard(run)
                self.step(Completed(AID, run))

    @rule()
    def start(self) -> None:
        if self.alive or self.dead:
            return
        self.incarnation += 1
        self.alive = True
        self.mailbox = Mailbox()
        self.step(ActorAlive(AID, self.incarnation, f"w{self.incarnation}"))

    @rule()
    def restart(self) -> None:
        if self.alive:
            self.alive = False
            self.step(ActorRestarting(AID, "killed"))

    @rule()
    def die(self) -> None:
        if not self.dead and self.n > 3:
            self.alive = False
            self.dead = True
            self.step(ActorDead(AID, "gone"))
            assert not self.open

    @invariant()
    def each_incarnation_runs_calls_in_submission_order(self) -> None:
        last: dict[int, int] = {}
        for inc, tid in self.ran:
            assert self.seq_of[tid] > last.get(inc, -1), self.core.story(tid)
            last[inc] = self.seq_of[tid]

    def teardown(self) -> None:
        if self.dead:
            return
        for tid in self.unready:
            self.step(Ready(AID, tid))
        self.unready.clear()
        if not self.alive:
            self.start()
        while self.wire:  # drain: every open call must run now
            self.deliver_first()
        assert not self.open, f"calls stuck: {sorted(self.open)}\n{self.core.story(AID)}"

    def deliver_first(self) -> None:
        inc, seq, tid = self.wire.pop(0)
        if inc == self.incarnation and self.alive:
            for run in self.mailbox.deliver("me", seq, tid):
                self.ran.append((self.incarnation, run))
                if run in self.open:
                    self.open.discard(run)
                    self.step(Completed(AID, run))


TestActorCaller = CallerMachine.TestCase
TestActorCaller.settings = settings(max_examples=200, stateful_step_count=50, deadline=None)


def test_calls_after_a_restart_are_numbered_from_zero_in_order() -> None:
    core = ActorCallerCore()
    core.handle(Track(AID, max_task_retries=1))
    core.handle(ActorAlive(AID, 0, "w0"))
    sent = [core.handle(Submit(AID, b"t%d" % i)) for i in range(3)]
    assert [s[0].seq for s in sent] == [0, 1, 2]  # type: ignore[union-attr]
    core.handle(Completed(AID, b"t0"))
    core.handle(ActorRestarting(AID, "killed"))
    again = core.handle(ActorAlive(AID, 1, "w1"))
    assert again == [Send(AID, b"t1", "w1", 0), Send(AID, b"t2", "w1", 1)]
    assert core.handle(Submit(AID, b"t3")) == [Send(AID, b"t3", "w1", 2)]
    core.validate()
