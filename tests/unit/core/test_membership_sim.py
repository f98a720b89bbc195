"""SWIM membership meshes of 5-20 nodes on SimNet: random schedules of joins, leaves, crashes,
pauses and partitions, checked against what every live member must end up knowing."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import example, given, settings
from hypothesis import strategies as st

from zmesh.core.membership import MemberEventKind, Membership, MembershipConfig, MemberState
from zmesh.core.membership_sim import add_member, first_event_times, grow_mesh, settled_mesh
from zmesh.testing.simnet import SimNet

CONFIG = MembershipConfig()
SIM = settings(max_examples=12, deadline=None)
GONE = (MemberEventKind.DEAD, MemberEventKind.LEFT)


@dataclass
class Outcome:
    nodes: dict[str, Membership]
    live: set[str]
    left: set[str]
    crashed: set[str]
    trace: dict[str, list[tuple[str, str, int, float]]]


def drain(
    nodes: dict[str, Membership], trace: dict[str, list[tuple[str, str, int, float]]]
) -> None:
    for address, node in nodes.items():
        trace.setdefault(address, []).extend(
            (e.kind.value, e.address, e.incarnation, round(e.at, 9)) for e in node.drain_events()
        )


ops = st.lists(
    st.tuples(
        st.sampled_from(["join", "leave", "crash"]),
        st.integers(0, 1000),  # picks the member acted on (or the join's seed)
        st.floats(0.0, 1.5),  # simulated seconds before the next operation
    ),
    min_size=1,
    max_size=8,
)


def run_schedule(seed: int, start: int, schedule: list[tuple[str, int, float]]) -> Outcome:
    net = SimNet(seed)
    nodes = grow_mesh(net, start, seed=seed, config=CONFIG)
    trace: dict[str, list[tuple[str, str, int, float]]] = {}
    live, left, crashed = set(nodes), set(), set()
    for kind, pick, delay in schedule:
        members = sorted(live)
        target = members[pick % len(members)]
        if kind == "join":
            address = f"m{len(nodes)}"
            nodes[address] = add_member(net, address, seed=seed, config=CONFIG, join=[target])
            live.add(address)
        elif len(live) > 2 and kind == "leave":
            for dest, message in nodes[target].leave(net.now):
                net.inject(dest, target, message)
            live.discard(target)
            left.add(target)
        elif len(live) > 2 and kind == "crash":
            net.crash(target)
            live.discard(target)
            crashed.add(target)
        net.run_for(delay)
        drain(nodes, trace)
    net.run_for(10.0)
    drain(nodes, trace)
    return Outcome(nodes, live, left, crashed, trace)


@SIM
@given(seed=st.integers(0, 2**16), start=st.integers(3, 8), schedule=ops)
# m8 joins through m2 just after m0 and m1 crash, then m2 and m3 leave: the join's gossip
# was spent on the crashed and leaving members, and anti-entropy went to the dead ones.
@example(
    seed=0,
    start=8,
    schedule=[("crash", 0, 0.0), ("crash", 0, 0.0), ("join", 0, 0.625)] + [("leave", 0, 0.0)] * 2,
)
# m7 joins through m1 as m1 leaves, and leaves itself before any answer: no live member
# ever hears of it, so it need not be in their views.
@example(
    seed=0,
    start=7,
    schedule=[("leave", 0, 0.0), ("join", 0, 0.0)] + [("leave", 0, 0.0)] * 4 + [("leave", 50, 0.0)],
)
# m6..m10 join through m0 as it leaves; m11 joins through m10 as m10 leaves too, and m10
# answers before it knows anyone: m11 must retry until an answer names a live member.
@example(
    seed=0,
    start=6,
    schedule=[("join", 0, 0.0)] * 5 + [("leave", 0, 0.0), ("join", 1, 0.0), ("leave", 1, 0.0)],
)
def test_every_live_member_learns_of_every_join_leave_and_crash(
    seed: int, start: int, schedule: list[tuple[str, int, float]]
) -> None:
    out = run_schedule(seed, start, schedule)
    for address in out.live:
        view = out.nodes[address].members()
        assert sorted(out.live) == out.nodes[address].live_members(), address
        for gone in out.left:
            if gone in view:  # it may have left before its own join reached this member
                assert view[gone].state is MemberState.LEFT, (address, gone)
        for gone in out.crashed:
            if gone in view:  # it may have crashed before its own join reached this member
                assert view[gone].state is MemberState.DEAD, (address, gone)
        # The event stream tells the same story: the last event about each member says
        # whether it is in the mesh.
        last: dict[str, str] = {}
        for kind, about, _, _ in out.trace[address]:
            if kind != "metadata-changed":
                last[about] = kind
        for other in out.live - {address}:
            assert last[other] in ("joined", "alive"), (address, other)
        for other in out.left:
            assert last.get(other, "left") == "left", (address, other)
        for other in out.crashed:
            assert last.get(other, "dead") == "dead", (address, other)


@settings(max_examples=4, deadline=None)
@given(seed=st.integers(0, 2**16), start=st.integers(3, 6), schedule=ops)
def test_same_seed_gives_the_same_event_trace(
    seed: int, start: int, schedule: list[tuple[str, int, float]]
) -> None:
    assert run_schedule(seed, start, schedule).trace == run_schedule(seed, start, schedule).trace


def test_different_seeds_give_different_traces() -> None:
    schedule = [("crash", 1, 0.5), ("join", 0, 0.5)]
    assert run_schedule(1, 5, schedule).trace != run_schedule(2, 5, schedule).trace


def test_crash_is_known_everywhere_within_three_simulated_seconds_at_20_members() -> None:
    net = SimNet(7)
    nodes = settled_mesh(net, 20, seed=7, config=CONFIG)
    net.run_for(2.0)
    net.crash("m13")
    crashed_at = net.now
    net.run_for(3.0)
    seen = first_event_times(nodes, "m13", GONE, {})
    assert set(seen) == set(nodes) - {"m13"}
    assert max(seen.values()) - crashed_at < 3.0


def pause_run(seed: int, pause: float, n: int = 10) -> tuple[dict[str, Membership], list[str]]:
    """Pause m3 of an n-member mesh for `pause` seconds; the event kinds others saw about it."""
    net = SimNet(seed)
    nodes = settled_mesh(net, n, seed=seed, config=CONFIG)
    net.run_for(2.0)
    for node in nodes.values():
        node.drain_events()
    net.pause("m3")
    net.run_for(pause)
    net.resume("m3")
    net.run_for(CONFIG.suspicion_timeout(n) + 5.0)
    seen = [e.kind.value for a, node in nodes.items() for e in node.drain_events()]
    return nodes, seen


def test_paused_member_refutes_its_suspicion_when_it_resumes() -> None:
    window = CONFIG.suspicion_timeout(10)
    nodes, seen = pause_run(seed=3, pause=0.75 * window)
    assert "suspect" in seen and "alive" in seen and "dead" not in seen
    assert nodes["m3"].incarnation >= 1
    for node in nodes.values():
        assert node.members()["m3"].state is MemberState.ALIVE
        assert node.members()["m3"].incarnation == nodes["m3"].incarnation


@SIM
@given(seed=st.integers(0, 2**16), fraction=st.floats(0.05, 0.75))
def test_member_paused_shorter_than_the_suspicion_window_is_never_declared_dead(
    seed: int, fraction: float
) -> None:
    nodes, seen = pause_run(seed, fraction * CONFIG.suspicion_timeout(10))
    assert "dead" not in seen
    assert all(node.live_members() == sorted(nodes) for node in nodes.values())


def test_member_paused_past_the_window_is_declared_dead_and_rejoins_when_it_resumes() -> None:
    nodes, seen = pause_run(seed=5, pause=CONFIG.suspicion_timeout(10) + 2.0)
    assert "dead" in seen and seen[-1] == "joined"
    assert all(node.live_members() == sorted(nodes) for node in nodes.values())


@SIM
@given(
    seed=st.integers(0, 2**16),
    n=st.integers(5, 12),
    cut=st.integers(1, 11),
    duration=st.floats(0.5, 8.0),
)
def test_views_converge_after_a_partition_heals(
    seed: int, n: int, cut: int, duration: float
) -> None:
    net = SimNet(seed)
    nodes = grow_mesh(net, n, seed=seed, config=CONFIG)
    names = sorted(nodes)
    side_a, side_b = names[: cut % (n - 1) + 1], names[cut % (n - 1) + 1 :]
    net.partition(side_a, side_b)
    net.run_for(duration)
    net.heal()
    net.run_for(15.0)
    for address, node in nodes.items():
        assert node.live_members() == names, address
        assert all(info.state is MemberState.ALIVE for info in node.members().values())


def test_partitioned_sides_declare_each_other_dead_before_healing() -> None:
    net = SimNet(11)
    nodes = grow_mesh(net, 8, seed=11, config=CONFIG)
    net.partition(["m0", "m1", "m2"], ["m3", "m4", "m5", "m6", "m7"])
    net.run_for(8.0)
    assert nodes["m0"].live_members() == ["m0", "m1", "m2"]
    assert nodes["m7"].live_members() == ["m3", "m4", "m5", "m6", "m7"]


@SIM
@given(
    seed=st.integers(0, 2**16),
    changes=st.lists(
        st.tuples(st.integers(0, 7), st.floats(0.0, 64.0), st.floats(0.0, 0.5)),
        min_size=1,
        max_size=10,
    ),
)
def test_metadata_propagates_and_the_newest_version_wins(
    seed: int, changes: list[tuple[int, float, float]]
) -> None:
    # Wide latency so that gossip about one member's metadata overtakes older gossip.
    net = SimNet(seed, latency=(0.001, 0.15))
    nodes = grow_mesh(net, 8, seed=seed, config=CONFIG)
    for index, cpus, delay in changes:
        nodes[f"m{index}"].set_metadata(resources={"CPU": cpus}, labels={"rack": str(index)})
        net.run_for(delay)
    net.run_for(5.0)
    for address, owner in nodes.items():
        for node in nodes.values():
            assert node.members()[address].metadata == owner.metadata, (address, node.address)


def test_metadata_change_is_an_event_for_every_other_member() -> None:
    net = SimNet(2)
    nodes = grow_mesh(net, 6, seed=2, config=CONFIG)
    for node in nodes.values():
        node.drain_events()
    nodes["m4"].set_metadata(resources={"GPU": 2.0})
    net.run_for(2.0)
    for address, node in nodes.items():
        events = [e for e in node.drain_events() if e.address == "m4"]
        if address != "m4":
            assert [e.kind for e in events] == [MemberEventKind.METADATA], address
            assert events[0].metadata.resources == {"GPU": 2.0}


def steady_load(n: int, seed: int = 4) -> float:
    net = SimNet(seed)
    settled_mesh(net, n, seed=seed, config=CONFIG)
    net.run_for(6.0)
    before = sum(net.sent.values())
    net.run_for(10.0)
    return (sum(net.sent.values()) - before) / n / 10.0


def test_steady_state_messages_per_member_do_not_grow_with_mesh_size() -> None:
    small, large = steady_load(5), steady_load(40)
    probes_and_acks = 2 / CONFIG.probe_interval
    assert probes_and_acks <= small < probes_and_acks * 1.2
    assert abs(large - small) / small < 0.1


def test_garbage_injected_into_a_running_mesh_is_dropped_and_the_mesh_stays_whole() -> None:
    net = SimNet(9)
    nodes = grow_mesh(net, 6, seed=9, config=CONFIG)
    for i, junk in enumerate([None, b"\x00", 3.5, {"seq": 1}, ["probe"], object()]):
        net.inject(f"m{i}", "mallory", junk)
    net.run_for(3.0)
    assert all(node.live_members() == sorted(nodes) for node in nodes.values())


@SIM
@given(seed=st.integers(0, 2**16))
def test_five_percent_message_loss_declares_no_live_member_dead(seed: int) -> None:
    net = SimNet(seed, drop_rate=0.05)
    nodes = settled_mesh(net, 10, seed=seed, config=CONFIG)
    net.run_for(20.0)
    kinds = {e.kind for node in nodes.values() for e in node.drain_events()}
    assert MemberEventKind.DEAD not in kinds
    assert all(node.live_members() == sorted(nodes) for node in nodes.values())


def test_crash_is_still_known_everywhere_under_five_percent_message_loss() -> None:
    net = SimNet(21, drop_rate=0.05)
    nodes = settled_mesh(net, 10, seed=21, config=CONFIG)
    net.run_for(2.0)
    net.crash("m6")
    net.run_for(5.0)
    assert set(first_event_times(nodes, "m6", GONE, {})) == set(nodes) - {"m6"}


def test_two_members_whose_answers_come_late_stop_suspecting_each_other() -> None:
    # Each way 0.12-0.16 s: every answer misses the 0.2 s probe period but makes the
    # suspicion window (a busy machine: chunks ahead of the acks, little CPU). Without the
    # local health penalty the two suspected each other at every probe, refuting each
    # time, for as long as it lasted; one refutation late and a member was dead.
    net = SimNet(7, latency=(0.12, 0.16))
    nodes = settled_mesh(net, 2, seed=7, config=CONFIG)
    net.run_for(30.0)
    late: list[str] = []
    for node in nodes.values():
        late += [e.kind.value for e in node.drain_events() if e.at > 10.0]
    assert "dead" not in late
    assert late.count("suspect") <= 2, late
    assert all(node.health_penalty > 0 for node in nodes.values())


def test_a_healthy_mesh_keeps_no_health_penalty() -> None:
    net = SimNet(8)
    nodes = settled_mesh(net, 10, seed=8, config=CONFIG)
    net.run_for(20.0)
    assert [node.health_penalty for node in nodes.values()] == [0] * 10
