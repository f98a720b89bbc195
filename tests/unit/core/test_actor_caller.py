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
    Done,
    Fail,
    Hold,
    Ready,
    Send,
    SendFailed,
    State,
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
        # a twin fed the same events through the fast paths where they apply: it must
        # answer and end up exactly as handle() does
        self.twin = ActorCallerCore()
        self.twin.handle(Track(AID, max_task_retries=1))

    def step(self, event: object) -> None:
        actions = self.core.handle(event)  # type: ignore[arg-type]
        self.check_twin(event, actions)
        for action in actions:
            if isinstance(action, Send):
                assert self.alive and action.address == f"w{self.incarnation}"
                self.wire.append((self.incarnation, action.seq, action.task_id))
            elif isinstance(action, Fail):
                self.open.discard(action.task_id)
        self.core.validate()

    def check_twin(self, event: object, actions: list[object]) -> None:
        twin = self.twin
        if isinstance(event, Submit) and event.ready:
            sent = twin.submit_fast(event.actor_id, event.task_id)
            if sent is None:
                assert twin.handle(event) == actions
            else:
                assert actions == [Send(AID, event.task_id, *sent)]
        elif isinstance(event, Completed):
            done = twin.complete_fast(event.actor_id, event.task_id)
            assert actions == ([Done(AID, event.task_id)] if done else [])
        else:
            twin.handle(event)  # type: ignore[arg-type]
        assert twin.actors == self.core.actors
        if isinstance(event, (Submit, Completed)):
            assert twin.story(event.task_id) == self.core.story(event.task_id)

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
    def kill_with_restart(self) -> None:
        """This caller kills the actor (restart allowed): Hold first, a call made meanwhile
        must not be sent to the dying worker, then the node says it is restarting."""
        if not self.alive:
            return
        before = len(self.wire)
        self.step(Hold(AID))
        self.submit(True)
        assert len(self.wire) == before, "a call went to the worker being killed"
        self.restart()

    @rule(data=st.data())
    def send_fails(self, data: st.DataObject) -> None:
        """A send finds no route: the call waits; the shell asks again and hears `alive`."""
        live = [i for i, (inc, _, tid) in enumerate(self.wire)
                if inc == self.incarnation and self.alive and tid in self.open]
        if not live:
            return
        _, _, tid = self.wire.pop(live[data.draw(st.integers(0, len(live) - 1))])
        self.step(SendFailed(AID, tid))
        self.step(ActorAlive(AID, self.incarnation, f"w{self.incarnation}"))

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


def test_hold_keeps_in_flight_calls_and_queues_new_ones() -> None:
    core = ActorCallerCore()
    core.handle(Track(AID, max_task_retries=1))
    core.handle(ActorAlive(AID, 0, "w0"))
    assert core.handle(Submit(AID, b"t0")) == [Send(AID, b"t0", "w0", 0)]
    assert core.handle(Hold(AID)) == []
    assert core.handle(Submit(AID, b"t1")) == []  # not to the worker being killed
    assert core.in_flight(AID, b"t0") is True and core.in_flight(AID, b"t1") is False
    assert core.handle(Completed(AID, b"t0")) == [Done(AID, b"t0")]  # it may still answer
    assert core.handle(Completed(AID, b"t0")) == []  # only once
    core.handle(ActorRestarting(AID, "killed"))
    assert core.handle(ActorAlive(AID, 1, "w1")) == [Send(AID, b"t1", "w1", 0)]
    core.validate()


def test_an_answer_from_a_restarted_worker_is_not_taken_for_the_retry() -> None:
    core = ActorCallerCore()
    core.handle(Track(AID, max_task_retries=1))
    core.handle(ActorAlive(AID, 0, "w0"))
    core.handle(Submit(AID, b"t0"))
    core.handle(ActorRestarting(AID, "crashed"))
    assert core.handle(Completed(AID, b"t0")) == []  # queued for a retry, not in flight
    assert core.handle(ActorAlive(AID, 1, "w1")) == [Send(AID, b"t0", "w1", 0)]
    assert core.handle(Completed(AID, b"t0")) == [Done(AID, b"t0")]
    assert core.open_calls(AID) == 0
    core.validate()


def test_a_call_s_own_max_task_retries_overrides_the_actor_s() -> None:
    core = ActorCallerCore()
    core.handle(Track(AID, max_task_retries=2))
    core.handle(ActorAlive(AID, 0, "w0"))
    core.handle(Submit(AID, b"none", True, 0))  # this call: no retry
    assert core.submit_fast(AID, b"always", -1) == ("w0", 1)  # this one: always
    core.handle(Submit(AID, b"actor"))  # the actor's two
    for incarnation in range(1, 4):
        core.handle(ActorRestarting(AID, "crashed"))
        core.handle(ActorAlive(AID, incarnation, f"w{incarnation}"))
    assert not core.in_flight(AID, b"none") and not core.in_flight(AID, b"actor")
    assert core.in_flight(AID, b"always") is True
    core.validate()


def test_a_failed_send_waits_with_every_later_call_for_news() -> None:
    core = ActorCallerCore()
    core.handle(ActorAlive(AID, 0, "w0"))
    assert core.handle(Submit(AID, b"t0")) == [Send(AID, b"t0", "w0", 0)]
    core.handle(SendFailed(AID, b"t0"))
    assert core.state(AID) is State.PENDING
    assert core.handle(Submit(AID, b"t1")) == []  # not ahead of t0
    core.validate()
    assert core.handle(ActorAlive(AID, 0, "w0")) == [Send(AID, b"t0", "w0", 0),
                                                     Send(AID, b"t1", "w0", 1)]
    core.validate()


def test_a_dead_actor_fails_calls_at_once_and_story_tells_why() -> None:
    core = ActorCallerCore()
    core.handle(ActorAlive(AID, 0, "w0"))
    core.handle(Submit(AID, b"t0"))
    assert core.handle(ActorDead(AID, "gone")) == [Fail(AID, b"t0", False, "gone")]
    assert core.handle(Submit(AID, b"t1")) == [Fail(AID, b"t1", False, "the actor is dead")]
    assert core.open_calls(AID) == 0
    assert "ActorDead" in core.story(b"t0") and "Fail" in core.story(b"t1")
    core.validate()
