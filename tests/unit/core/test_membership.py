"""The SWIM membership core driven message by message, without a network."""

from __future__ import annotations

import random

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zmesh.core.membership import (
    MemberEventKind,
    Membership,
    MembershipConfig,
    MemberState,
    Metadata,
)
from zmesh.protocol.messages.membership import (
    MEMBERSHIP_MESSAGES,
    Gossip,
    Join,
    MemberUpdate,
    Probe,
    ProbeAck,
    ProbeRequest,
    PushPull,
)

ALIVE, SUSPECT, DEAD, LEFT = MemberState


def node(address: str = "a", **kwargs: object) -> Membership:
    m = Membership(address, rng=random.Random(0), **kwargs)  # type: ignore[arg-type]
    m.tick(0.0)
    return m


def update(address: str, state: MemberState, inc: int, version: int = 0) -> MemberUpdate:
    return MemberUpdate(address, state, inc, Metadata(version, {"CPU": float(version)}, {}))


def gossip(m: Membership, *updates: MemberUpdate, now: float = 1.0) -> None:
    assert m.receive(now, "x", Gossip(list(updates))) == []


def state_of(m: Membership, address: str) -> tuple[MemberState, int]:
    info = m.members()[address]
    return info.state, info.incarnation


def tick_until_probe(m: Membership) -> tuple[float, str, Probe]:
    """Run m's timers until it sends a probe (its first one goes out at a random phase)."""
    for _ in range(20):
        now = m.next_deadline() or 0.0
        for dest, msg in m.tick(now):
            if isinstance(msg, Probe):
                return now, dest, msg
    raise AssertionError("no probe was sent")


def kinds(m: Membership) -> list[tuple[str, str]]:
    return [(e.kind.value, e.address) for e in m.drain_events()]


# -- configuration ------------------------------------------------------------------------
def test_config_rejects_non_positive_values_naming_the_field() -> None:
    with pytest.raises(ValueError, match="probe_interval"):
        MembershipConfig(probe_interval=0)
    with pytest.raises(TypeError, match="gossip_fanout"):
        MembershipConfig(gossip_fanout="3")  # type: ignore[arg-type]


def test_config_needs_ack_timeout_shorter_than_probe_interval() -> None:
    with pytest.raises(ValueError, match="ack_timeout"):
        MembershipConfig(probe_interval=0.2, ack_timeout=0.2)


def test_suspicion_window_and_retransmissions_grow_with_log_of_mesh_size() -> None:
    cfg = MembershipConfig()
    assert cfg.suspicion_timeout(10) < cfg.suspicion_timeout(100) < cfg.suspicion_timeout(1000)
    assert cfg.suspicion_timeout(100) == pytest.approx(2 * cfg.suspicion_timeout(10))
    assert cfg.retransmit_limit(10) < cfg.retransmit_limit(1000)


# -- probes ---------------------------------------------------------------------------------
def test_probe_is_answered_with_an_ack_echoing_its_seq_even_from_an_unknown_member() -> None:
    m = node()
    out = m.receive(1.0, "stranger", Probe(42))
    assert len(out) == 1
    dest, ack = out[0]
    assert dest == "stranger" and isinstance(ack, ProbeAck) and ack.seq == 42


def test_unanswered_probe_asks_others_then_suspects_the_target() -> None:
    cfg = MembershipConfig()
    m = node(config=cfg)
    gossip(m, update("b", ALIVE, 0), update("c", ALIVE, 0), update("d", ALIVE, 0), now=0.0)
    m.drain_events()
    start, probed, _ = tick_until_probe(m)
    now = start + cfg.ack_timeout
    requests = [(d, msg) for d, msg in m.tick(now) if isinstance(msg, ProbeRequest)]
    assert {d for d, _ in requests} == {"b", "c", "d"} - {probed}
    assert all(msg.target == probed for _, msg in requests)
    m.tick(start + cfg.probe_interval)
    assert state_of(m, probed) == (SUSPECT, 0)
    assert kinds(m) == [("suspect", probed)]


def test_ack_relayed_by_a_helper_keeps_the_target_alive() -> None:
    cfg = MembershipConfig()
    m = node(config=cfg)
    gossip(m, update("b", ALIVE, 0), update("c", ALIVE, 0), now=0.0)
    now, _, _ = tick_until_probe(m)
    requests = m.tick(now + cfg.ack_timeout)
    assert len(requests) == 1 and isinstance(requests[0][1], ProbeRequest)
    helper, request = requests[0]
    m.receive(now + cfg.ack_timeout + 0.01, helper, ProbeAck(request.seq))
    m.tick(now + cfg.probe_interval)
    assert all(info.state is ALIVE for info in m.members().values())


def test_probe_request_is_relayed_to_the_target_and_its_ack_back_to_the_origin() -> None:
    m = node("helper")
    out = m.receive(1.0, "origin", ProbeRequest(7, "target"))
    assert len(out) == 1
    dest, probe = out[0]
    assert dest == "target" and isinstance(probe, Probe)
    back = m.receive(1.01, "target", ProbeAck(probe.seq))
    assert len(back) == 1
    assert back[0][0] == "origin" and isinstance(back[0][1], ProbeAck) and back[0][1].seq == 7


def test_ack_with_unknown_seq_is_ignored() -> None:
    m = node()
    assert m.receive(1.0, "b", ProbeAck(999)) == []


# -- merging updates ------------------------------------------------------------------------
def test_higher_incarnation_wins_and_at_equal_incarnation_worse_state_wins() -> None:
    m = node()
    gossip(m, update("b", ALIVE, 0))
    gossip(m, update("b", SUSPECT, 0))
    assert state_of(m, "b") == (SUSPECT, 0)
    gossip(m, update("b", ALIVE, 0))  # stale: the same incarnation cannot refute
    assert state_of(m, "b") == (SUSPECT, 0)
    gossip(m, update("b", ALIVE, 1))  # b refuted
    assert state_of(m, "b") == (ALIVE, 1)
    gossip(m, update("b", DEAD, 1))
    gossip(m, update("b", ALIVE, 1))
    assert state_of(m, "b") == (DEAD, 1)
    assert kinds(m) == [("joined", "b"), ("suspect", "b"), ("alive", "b"), ("dead", "b")]


def test_dead_member_that_comes_back_with_higher_incarnation_rejoins() -> None:
    m = node()
    out = m.receive(1.0, "x", Gossip([update("b", ALIVE, 0), update("b", DEAD, 0),
                                      update("b", ALIVE, 1)]))
    assert out == [("b", Gossip([update("b", DEAD, 0)]))]  # told of its death
    assert state_of(m, "b") == (ALIVE, 1)
    assert kinds(m) == [("joined", "b"), ("dead", "b"), ("joined", "b")]


def test_leave_overrides_suspicion_at_the_same_incarnation() -> None:
    m = node()
    gossip(m, update("b", SUSPECT, 2), update("b", LEFT, 2))
    assert state_of(m, "b") == (LEFT, 2)
    assert "b" not in m.live_members()


def test_tombstone_of_an_unknown_member_is_kept_quietly_and_blocks_stale_alive() -> None:
    m = node()
    gossip(m, update("b", DEAD, 3), update("b", ALIVE, 2))
    assert state_of(m, "b") == (DEAD, 3)
    assert m.drain_events() == []


def test_suspected_member_refutes_by_bumping_its_incarnation() -> None:
    m = node("a")
    gossip(m, update("a", SUSPECT, 0))
    assert m.incarnation == 1
    ack = m.receive(1.1, "b", Probe(1))[0][1]
    assert isinstance(ack, ProbeAck)
    mine = [u for u in ack.updates if u.address == "a"]
    assert mine and mine[0].state is ALIVE and mine[0].incarnation == 1


def test_stale_suspicion_of_an_older_incarnation_is_not_refuted_again() -> None:
    m = node("a")
    gossip(m, update("a", DEAD, 4))
    assert m.incarnation == 5
    gossip(m, update("a", SUSPECT, 3))
    assert m.incarnation == 5


def test_each_death_declared_of_this_node_is_counted_once() -> None:
    # The shell fences its workers each time this grows (a false death: paused, cut off).
    m = node("a")
    gossip(m, update("a", SUSPECT, 0))
    assert m.declared_dead == 0
    gossip(m, update("a", DEAD, 1))
    gossip(m, update("a", DEAD, 1))  # the same death, gossiped again
    assert m.declared_dead == 1 and m.incarnation == 2
    # a death declared at an older incarnation (before our refutation reached its
    # declarer) still happened: the others gave up on us then
    gossip(m, update("a", DEAD, 0))
    assert m.declared_dead == 2


def test_a_death_recorded_of_a_past_life_at_this_address_is_not_counted() -> None:
    m = node("a", labels={"pid": "2"})
    gossip(m, MemberUpdate("a", DEAD, 3, Metadata(4, {}, {"pid": "1"})))
    assert m.declared_dead == 0 and m.incarnation == 4  # (refuted all the same)
    gossip(m, MemberUpdate("a", DEAD, 4, Metadata(5, {}, {"pid": "2"})))
    assert m.declared_dead == 1


def test_a_member_held_dead_that_comes_back_alive_is_told_of_its_death() -> None:
    # b refuted a suspicion (incarnation 1) without ever hearing of its death at 0: it
    # never learnt that we gave up on it, so its shell fenced nothing (on the simulated
    # mesh an actor's old incarnation lived on next to the new one). We tell it the death
    # we held, once.
    m = node("a")
    gossip(m, update("b", ALIVE, 0))
    gossip(m, update("b", DEAD, 0))
    out = m.receive(1.0, "x", Gossip([update("b", ALIVE, 1)]))
    assert state_of(m, "b") == (ALIVE, 1)
    notices = [msg for dest, msg in out if dest == "b"]
    assert notices == [Gossip([update("b", DEAD, 0)])], out
    b = node("b")
    b.receive(1.0, "a", notices[0])
    assert b.declared_dead == 1
    out = m.receive(1.0, "x", Gossip([update("b", ALIVE, 1)]))  # nothing new: no notice
    assert [dest for dest, _ in out] == []
    out = m.receive(1.0, "x", Gossip([update("b", SUSPECT, 1)]))  # not a death: none
    assert [dest for dest, _ in out] == []


def test_newer_metadata_version_wins_and_older_is_ignored() -> None:
    m = node()
    gossip(m, update("b", ALIVE, 0, version=2))
    gossip(m, update("b", ALIVE, 0, version=1))
    assert m.members()["b"].metadata.version == 2
    gossip(m, update("b", ALIVE, 0, version=3))
    assert m.members()["b"].metadata == Metadata(3, {"CPU": 3.0}, {})
    assert kinds(m) == [("joined", "b"), ("metadata-changed", "b")]


def test_restarted_node_lifts_its_metadata_version_above_the_one_others_hold() -> None:
    m = node("a", resources={"CPU": 8.0})
    gossip(m, MemberUpdate("a", ALIVE, 0, Metadata(5, {"CPU": 1.0}, {})))
    assert m.metadata.version == 6 and m.metadata.resources == {"CPU": 8.0}


def test_set_metadata_bumps_the_version_and_keeps_what_was_not_given() -> None:
    m = node("a", resources={"CPU": 4.0}, labels={"zone": "x"})
    m.set_metadata(resources={"CPU": 2.0, "GPU": 1})
    assert m.metadata == Metadata(1, {"CPU": 2.0, "GPU": 1.0}, {"zone": "x"})
    assert m.members()["a"].metadata == m.metadata


def test_set_metadata_rejects_values_of_the_wrong_type() -> None:
    m = node()
    with pytest.raises(TypeError, match="resources"):
        m.set_metadata(resources={"CPU": "four"})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="labels"):
        m.set_metadata(labels={"zone": 3})  # type: ignore[dict-item]


# -- join and leave -------------------------------------------------------------------------
def test_join_needs_a_seed_other_than_ourselves() -> None:
    with pytest.raises(ValueError, match="seed"):
        node("a").join(0.0, ["a"])


def test_seed_answers_a_join_with_its_full_state_and_the_joiner_takes_it() -> None:
    seed, joiner = node("s"), node("j")
    gossip(seed, update("b", ALIVE, 3))
    [(dest, join)] = joiner.join(0.0, ["s"])
    assert dest == "s" and isinstance(join, Join)
    [(back, state)] = seed.receive(0.1, "j", join)
    assert back == "j" and isinstance(state, PushPull) and state.reply
    joiner.receive(0.2, "s", state)
    assert joiner.live_members() == ["b", "j", "s"]
    assert seed.live_members() == ["b", "j", "s"]
    # Answered: no more join retries.
    assert not any(isinstance(msg, Join) for _, msg in joiner.tick(5.0))


def test_join_is_retried_until_a_seed_answers() -> None:
    m = node("j")
    m.join(0.0, ["s"])
    retries = [d for d, msg in m.tick(m.config.join_retry_interval) if isinstance(msg, Join)]
    assert retries == ["s"]


def test_leave_tells_members_and_later_probes_still_carry_it() -> None:
    m = node("a")
    gossip(m, update("b", ALIVE, 0), update("c", ALIVE, 0))
    out = m.leave(2.0)
    assert {d for d, _ in out} == {"b", "c"}
    assert all(isinstance(msg, Gossip) and msg.updates[0].state is LEFT for _, msg in out)
    assert m.members()["a"].state is LEFT and m.live_members() == ["b", "c"]
    assert m.tick(3.0) == []  # a member that left probes nobody


# -- bad input ------------------------------------------------------------------------------
def _garbage() -> st.SearchStrategy[object]:
    scalars = st.one_of(st.none(), st.integers(), st.text(max_size=5), st.floats())
    bad_update = st.builds(MemberUpdate, scalars, scalars, scalars, st.one_of(st.none(), scalars))
    updates = st.one_of(scalars, st.lists(st.one_of(bad_update, scalars), max_size=4))
    return st.one_of(
        scalars,
        st.builds(Probe, scalars, updates),
        st.builds(ProbeAck, scalars, updates),
        st.builds(ProbeRequest, scalars, scalars, updates),
        st.builds(Gossip, updates),
        st.builds(Join, st.one_of(bad_update, scalars)),
        st.builds(PushPull, updates, scalars),
    )


@settings(max_examples=150, deadline=None)
@given(message=_garbage(), sender=st.one_of(st.text(max_size=4), st.none(), st.integers()))
def test_malformed_messages_do_not_crash_the_core(message: object, sender: object) -> None:
    m = node("a")
    gossip(m, update("b", ALIVE, 0), now=0.5)
    out = m.receive(1.0, sender, message)  # type: ignore[arg-type]
    assert all(isinstance(dest, str) and dest for dest, _ in out)
    m.tick(2.0)
    assert m.members()["a"].state is ALIVE
    assert m.members()["b"].state is ALIVE


def test_every_message_round_trips_through_msgpack() -> None:
    samples = [
        Probe(1, [update("b", SUSPECT, 2, version=1)]),
        ProbeAck(2, [MemberUpdate("c", DEAD, 0)]),
        ProbeRequest(3, "d", []),
        Gossip([update("e", LEFT, 9)]),
        Join(update("f", ALIVE, 0)),
        PushPull([update("g", ALIVE, 1)], reply=True),
    ]
    decoder = msgspec.msgpack.Decoder(type=_union())
    for message in samples:
        assert decoder.decode(msgspec.msgpack.encode(message)) == message


def test_wire_decoder_rejects_unknown_state_and_negative_incarnation() -> None:
    decoder = msgspec.msgpack.Decoder(type=_union())
    with pytest.raises(msgspec.ValidationError):
        decoder.decode(msgspec.msgpack.encode(Gossip([MemberUpdate("b", 7, 0)])))  # type: ignore[arg-type]
    with pytest.raises(msgspec.ValidationError):
        decoder.decode(msgspec.msgpack.encode(Gossip([MemberUpdate("b", ALIVE, -1)])))


def _union() -> object:
    union: object = MEMBERSHIP_MESSAGES[0]
    for cls in MEMBERSHIP_MESSAGES[1:]:
        union = union | cls  # type: ignore[operator]
    return union


def test_events_name_what_changed() -> None:
    m = node()
    gossip(m, update("b", ALIVE, 0), update("b", LEFT, 0))
    events = m.drain_events()
    assert [e.kind for e in events] == [MemberEventKind.JOINED, MemberEventKind.LEFT]
    assert events[1].address == "b" and events[1].at == 1.0 and events[1].incarnation == 0
    assert m.drain_events() == []


def test_a_node_that_was_frozen_does_not_blame_its_probe_target() -> None:
    cfg = MembershipConfig()
    m = node(config=cfg)
    gossip(m, update("b", ALIVE, 0), now=0.0)
    now, _, _ = tick_until_probe(m)
    m.tick(now + 10 * cfg.probe_interval)  # we were paused: no ack could be read in time
    assert state_of(m, "b") == (ALIVE, 0)


def test_dead_members_are_forgotten_after_the_retention_period() -> None:
    cfg = MembershipConfig(dead_retention=5.0)
    m = node(config=cfg)
    gossip(m, update("b", ALIVE, 0), update("b", DEAD, 0), now=1.0)
    m.tick(3.0)
    assert "b" in m.members()
    m.tick(7.5)
    assert "b" not in m.members()


def test_a_member_alone_asks_for_no_timer_and_probes_a_newcomer_at_once() -> None:
    # Alone, every timer had nothing to do, yet a node woke ~6 times a second for them
    # (probes, tombstone clean-up, and gossip rounds for its own metadata with nobody to
    # tell): idle CPU. News waits until there is someone to tell.
    m = node()
    m.set_metadata(resources={"CPU": 2.0})
    assert m.tick(5.0) == []
    assert m.next_deadline() == float("inf")
    gossip(m, update("b", ALIVE, 0), now=9.0)
    assert m.has_peers()
    due = m.next_deadline()
    assert due is not None and due <= 9.0, "probes and news to b are overdue: run now"
    sent = m.tick(9.0)
    assert any(dest == "b" and isinstance(msg, Probe) for dest, msg in sent)
    assert any(u.address == "a" and u.metadata.resources == {"CPU": 2.0}
               for _, msg in sent for u in getattr(msg, "updates", [])), \
        "the metadata set while alone reaches the newcomer"


def test_a_member_holding_only_tombstones_still_forgets_them() -> None:
    cfg = MembershipConfig(dead_retention=5.0)
    m = node(config=cfg)
    gossip(m, update("b", ALIVE, 0), update("b", DEAD, 0), now=1.0)
    while "b" in m.members():
        due = m.next_deadline()
        assert due is not None and due < 30.0, "a tombstone keeps the clean-up timer armed"
        m.tick(due)
    assert m.next_deadline() == float("inf")
