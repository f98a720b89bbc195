"""The ownership core under random event sequences: validate() after every step, objects
freed exactly when the last holder goes (checked against a plain model), and every failed
read of a borrowed copy gets exactly one verdict, `owner died` iff its owner's death came."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from zmesh.core.ownership import (
    AddBorrower,
    AddLocal,
    AddSubmitted,
    BorrowerGone,
    Escaped,
    FailBorrowed,
    Free,
    OwnerAnswered,
    OwnerNodeDied,
    Ownership,
    ProbeOwner,
    ProbeTimedOut,
    ReadFailed,
    RemoveBorrower,
    RemoveLocal,
    RemoveSubmitted,
    Verdict,
)

ME = "ipc://s1/me"
OWNERS = [ME, "ipc://s1/peer", "ipc://s2/far", "tcp://10.0.0.2:1"]
OIDS = [bytes([i]) * 4 for i in range(6)]


class OwnershipMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.core = Ownership(ME)
        self.owner_of: dict[bytes, str] = {}
        self.local: Counter[bytes] = Counter()
        self.submitted: Counter[bytes] = Counter()
        self.borrowers: dict[bytes, set[str]] = {}
        self.escaped: set[bytes] = set()
        self.freed: list[bytes] = []
        self.dead: set[str] = set()
        self.gone: set[str] = set()  # borrowers whose death the core handled
        self.awaiting: dict[bytes, str] = {}  # failed reads without a verdict -> owner
        self.probes: set[str] = set()
        self.timed_out: set[str] = set()

    def step(self, event: object) -> list[object]:
        actions: list[object] = list(self.core.handle(event))  # type: ignore[arg-type]
        for a in actions:
            if isinstance(a, Free):
                assert a.object_id in self.owner_of, self.core.story(a.object_id)
                self.freed.append(a.object_id)
                for model in (self.local, self.submitted):
                    model.pop(a.object_id, None)
                self.borrowers.pop(a.object_id, None)
                self.escaped.discard(a.object_id)
                del self.owner_of[a.object_id]
            elif isinstance(a, Verdict):
                owner = self.awaiting.pop(a.object_id, None)
                if owner is not None:
                    assert a.owner_died == (owner in self.dead or owner in self.timed_out), \
                        self.core.story(a.object_id)
            elif isinstance(a, ProbeOwner):
                assert a.owner not in self.probes
                self.probes.add(a.owner)
            elif isinstance(a, FailBorrowed):
                assert self.owner_of[a.object_id] != ME
        self.core.validate()
        return actions

    def tracked(self, oid: bytes) -> bool:
        return oid in self.owner_of

    def in_use(self, oid: bytes) -> bool:
        return bool(self.local[oid] or self.submitted[oid] or self.borrowers.get(oid)
                    or oid in self.escaped)

    @rule(oid=st.sampled_from(OIDS), owner=st.sampled_from(OWNERS))
    def add_local(self, oid: bytes, owner: str) -> None:
        owner = self.owner_of.setdefault(oid, owner)
        self.local[oid] += 1
        self.step(AddLocal(oid, owner))

    @rule(oid=st.sampled_from(OIDS))
    def remove_local(self, oid: bytes) -> None:
        if self.local[oid] <= 0:
            return
        self.local[oid] -= 1
        unused = not self.in_use(oid)
        self.step(RemoveLocal(oid))
        assert (oid in self.core.records) != unused, self.core.story(oid)

    @rule(oid=st.sampled_from(OIDS))
    def submit(self, oid: bytes) -> None:
        if self.tracked(oid):
            self.submitted[oid] += 1
        self.step(AddSubmitted((oid,)))

    @rule(oid=st.sampled_from(OIDS))
    def finish(self, oid: bytes) -> None:
        if self.submitted[oid] <= 0:
            return
        self.submitted[oid] -= 1
        self.step(RemoveSubmitted((oid,)))

    @rule(oid=st.sampled_from(OIDS), who=st.sampled_from(["a", "b"]))
    def borrow(self, oid: bytes, who: str) -> None:
        if self.owner_of.get(oid) != ME:
            return
        if who not in self.gone:  # (a dead one's late news registers nothing: death is final)
            self.borrowers.setdefault(oid, set()).add(who)
        self.step(AddBorrower((oid,), who))

    @rule(oid=st.sampled_from(OIDS), who=st.sampled_from(["a", "b"]))
    def unborrow(self, oid: bytes, who: str) -> None:
        if who not in self.borrowers.get(oid, set()):
            return
        self.borrowers[oid].discard(who)
        self.step(RemoveBorrower((oid,), who))

    @rule(who=st.sampled_from(["a", "b"]))
    def borrower_dies(self, who: str) -> None:
        for oid in list(self.borrowers):
            self.borrowers[oid].discard(who)
        self.gone.add(who)
        self.step(BorrowerGone(who))

    @rule(oid=st.sampled_from(OIDS))
    def escape(self, oid: bytes) -> None:
        if self.tracked(oid):
            self.escaped.add(oid)
        self.step(Escaped((oid,)))

    @rule(oid=st.sampled_from(OIDS))
    def read_failed(self, oid: bytes) -> None:
        owner = self.owner_of.get(oid)
        if owner is None or owner == ME or oid in self.awaiting:
            return
        self.awaiting[oid] = owner
        actions = self.step(ReadFailed(oid))
        if owner in self.dead:
            assert actions == [Verdict(oid, True, actions[0].why)]  # type: ignore[union-attr]

    @rule(owner=st.sampled_from(OWNERS[1:]))
    def owner_answers(self, owner: str) -> None:
        if owner in self.dead or owner not in self.probes:
            return
        self.probes.discard(owner)
        self.step(OwnerAnswered(owner))

    @rule(owner=st.sampled_from(OWNERS[1:]))
    def probe_times_out(self, owner: str) -> None:
        if owner not in self.probes:
            return
        self.probes.discard(owner)
        self.timed_out.add(owner)
        self.step(ProbeTimedOut(owner))
        self.timed_out.discard(owner)

    @rule(node=st.sampled_from([("ipc://s2/node", "ipc://s2/"), ("tcp://10.0.0.2:1", "")]))
    def node_dies(self, node: tuple[str, str]) -> None:
        address, prefix = node
        dead = {o for o in OWNERS if o == address or (prefix and o.startswith(prefix))}
        self.dead |= dead
        self.probes -= dead
        self.step(OwnerNodeDied(address, prefix, "was killed"))

    @invariant()
    def records_match_the_model(self) -> None:
        assert set(self.core.records) == set(self.owner_of)
        for oid in self.owner_of:
            assert self.in_use(oid), self.core.story(oid)
            assert self.core.records[oid].local == self.local[oid]

    @invariant()
    def every_failed_read_waits_on_a_probe(self) -> None:
        for oid, owner in self.awaiting.items():
            assert owner in self.probes or oid not in self.owner_of, self.core.story(oid)


TestOwnership = OwnershipMachine.TestCase
TestOwnership.settings = settings(max_examples=200, stateful_step_count=50, deadline=None)


def test_a_failed_read_of_a_copy_whose_owner_answers_is_only_lost() -> None:
    core = Ownership(ME)
    core.handle(AddLocal(b"x", "ipc://s1/peer"))
    assert core.handle(ReadFailed(b"x")) == [ProbeOwner("ipc://s1/peer")]
    assert core.handle(ReadFailed(b"x")) == []  # one probe per owner
    assert core.handle(OwnerAnswered("ipc://s1/peer")) == [Verdict(b"x", False, "")]
    core.validate()


def test_a_failed_read_before_the_owners_node_death_becomes_owner_died() -> None:
    core = Ownership(ME)
    core.handle(AddLocal(b"x", "ipc://s2/worker.sock"))
    assert core.handle(ReadFailed(b"x")) == [ProbeOwner("ipc://s2/worker.sock")]
    out = core.handle(OwnerNodeDied("tcp://n2", "ipc://s2/", "was killed"))
    assert Verdict(b"x", True, "was killed") in out
    assert core.handle(ReadFailed(b"x")) == [Verdict(b"x", True, "was killed")]
    assert "ReadFailed" in core.story(b"x")
    core.validate()


def test_contained_and_held_objects_go_with_their_outer_value() -> None:
    from zmesh.core.ownership import HoldBorrowed, HoldContained

    core = Ownership(ME)
    core.handle(AddLocal(b"outer", ME))
    core.handle(AddLocal(b"inner", ME))
    core.handle(HoldContained(b"outer", (b"inner",)))
    assert core.handle(RemoveLocal(b"inner")) == []
    core.handle(HoldBorrowed((b"outer",), (b"theirs",), "ipc://s1/peer"))
    out = core.handle(RemoveLocal(b"outer"))
    assert [a.object_id for a in out if isinstance(a, Free)] == [b"outer", b"inner", b"theirs"]
    assert not core.records


def test_refs_held_by_several_returns_live_until_the_last_of_them_goes() -> None:
    """One message lists the refs inside several values (a task's returns, a batch of a
    generator's items) without saying which value holds which: dropping the first value
    must not let go of a ref that a later one holds (before, the first live value alone
    held them all: the owner freed the object under the second value's ref)."""
    from zmesh.core.ownership import HoldBorrowed

    peer = "ipc://s1/peer"
    core = Ownership(ME)
    for oid in (b"item0", b"item1", b"item2"):
        core.handle(AddLocal(oid, ME))
    core.handle(RemoveLocal(b"item2"))  # gone before the message came: holds nothing
    assert core.handle(HoldBorrowed((b"item0", b"item1", b"item2"), (b"theirs",), peer)) == []
    core.validate()
    assert core.handle(RemoveLocal(b"item0")) == [Free(b"item0", ME, True, (b"theirs",))]
    assert b"theirs" in core.records
    core.validate()
    out = core.handle(RemoveLocal(b"item1"))
    assert [a.object_id for a in out if isinstance(a, Free)] == [b"item1", b"theirs"]
    assert not core.records
    core.validate()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3), st.sampled_from(["me", "other"])),
                max_size=60))
def test_fast_paths_do_what_handle_does(steps: list[tuple[int, int, str]]) -> None:
    """add_local/remove_local (the hot path of every ref) and add_submitted/remove_submitted
    (of every task with ref arguments) give the same records, actions and story as handle()
    with their events."""
    slow, fast = Ownership("me"), Ownership("me")
    local: Counter[bytes] = Counter()  # what the refs and tasks hold (each released once)
    submitted: Counter[bytes] = Counter()
    for op, n, owner in steps:
        oid = b"o%d" % n
        if op == 0:
            slow.handle(AddLocal(oid, owner))
            fast.add_local(oid, owner)
            local[oid] += 1
        elif op == 1 and local[oid] > 0:
            local[oid] -= 1
            assert fast.remove_local(oid) == slow.handle(RemoveLocal(oid))
        elif op == 2:
            ids = (oid, b"o%d" % ((n + 1) % 4))
            slow.handle(AddSubmitted(ids))
            fast.add_submitted(ids)
            submitted.update(i for i in ids if i in fast.records)
        elif op == 3 and submitted[oid] > 0:
            submitted[oid] -= 1
            assert fast.remove_submitted((oid,)) == slow.handle(RemoveSubmitted((oid,)))
        assert fast.records == slow.records
        fast.validate()
    for n in range(4):
        assert fast.story(b"o%d" % n) == slow.story(b"o%d" % n)
