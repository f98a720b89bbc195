"""Randomized runs of the control store on SimNet: writes interleaved with joins, leaves, crashes.

Invariants: every acknowledged write stays readable with its latest acknowledged value,
versions of a key are never reused for different values, the owners of a key agree once
the cluster settles, and a subscriber sees every version of every key once, in order.
Set ZMESH_CONTROL_STORE_EXAMPLES to run more examples than the fast default.
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zmesh.protocol.messages.control import KvStatus
from zmesh.store.control_sim import StoreCluster
from zmesh.store.control_store import StoreConfig

EXAMPLES = int(os.environ.get("ZMESH_CONTROL_STORE_EXAMPLES", "25"))
KEYS = [f"kv/{i}" for i in range(5)]
STABLE = "n0"  # never crashes or leaves: it holds the subscriptions under test


@dataclass
class Issued:
    client: str
    rid: int
    op: str
    key: str
    value: bytes | None


write_step = st.tuples(
    st.just("write"),
    st.integers(0, 7),  # which live member issues it
    st.sampled_from(KEYS),
    st.sampled_from(["put", "put", "cas", "if_absent", "delete"]),
    st.integers(0, 4),  # expected version for cas
)
run_step = st.tuples(st.just("run"), st.floats(0.0005, 0.05))
join_step = st.tuples(st.just("join"))
leave_step = st.tuples(st.just("leave"), st.integers(0, 7))
crash_step = st.tuples(
    st.just("crash"), st.lists(st.integers(0, 7), min_size=1, max_size=2), st.floats(0.0, 0.6)
)
steps = st.lists(
    st.one_of(write_step, write_step, write_step, run_step, join_step, leave_step, crash_step),
    min_size=5,
    max_size=40,
)


def run_schedule(seed: int, schedule: list[tuple[object, ...]], drop_rate: float = 0.0) -> None:
    config = StoreConfig(request_timeout=60.0, gap_timeout=0.5, watch_resync_interval=0.5)
    cluster = StoreCluster(["n0", "n1", "n2", "n3"], seed=seed, config=config, drop_rate=drop_rate)
    cluster.settle()
    prefix_sub = cluster.call(STABLE, lambda s, t: s.subscribe(t, "kv/", prefix=True))
    key_sub = cluster.call(STABLE, lambda s, t: s.subscribe(t, KEYS[0]))
    cluster.wait(STABLE, prefix_sub)
    cluster.wait(STABLE, key_sub)
    issued: list[Issued] = []
    joined = 0

    def others() -> list[str]:
        return [n for n in cluster.live() if n != STABLE]

    for step in schedule:
        kind = step[0]
        if kind == "write":
            _, who, key, op, expected = step
            live = cluster.live()
            client = live[int(who) % len(live)]  # type: ignore[call-overload]
            value = f"{client}:{len(issued)}".encode()
            if op == "put":
                rid = cluster.call(client, lambda s, t: s.put(t, key, value))  # noqa: B023
            elif op == "cas":
                rid = cluster.call(
                    client, lambda s, t: s.put(t, key, value, expected_version=expected)  # noqa: B023
                )
            elif op == "if_absent":
                rid = cluster.call(client, lambda s, t: s.put(t, key, value, if_absent=True))  # noqa: B023
            else:
                value = None
                rid = cluster.call(client, lambda s, t: s.delete(t, key))  # noqa: B023
            issued.append(Issued(client, rid, str(op), str(key), value))
        elif kind == "run":
            cluster.run_for(float(step[1]))  # type: ignore[arg-type]
        elif kind == "join":
            joined += 1
            cluster.settle()
            cluster.join(f"j{joined}")
        elif kind == "leave":
            candidates = others()
            if len(candidates) >= 1:
                cluster.settle()  # one batch of departures at a time
                cluster.leave(candidates[int(step[1]) % len(candidates)])  # type: ignore[call-overload]
        elif kind == "crash":
            _, picks, delay = step
            candidates = others()
            victims = sorted({candidates[int(i) % len(candidates)] for i in picks}) if candidates else []  # type: ignore[attr-defined]
            if victims:
                cluster.settle()  # re-replicated before the next batch of crashes
                for v in victims:
                    cluster.crash(v, detect=False)
                cluster.run_for(float(delay))  # type: ignore[arg-type]
                cluster.detect(*victims)

    cluster.settle()
    running = set(n for n in cluster.stores if n not in cluster.net.crashed)
    for item in issued:
        if item.client in running:
            cluster.wait(item.client, item.rid, timeout=120.0)
    cluster.settle()
    cluster.run_for(2.0)  # past a resync and a gap timeout
    check_invariants(cluster, issued, prefix_sub, key_sub, lossy=drop_rate > 0)


def check_invariants(
    cluster: StoreCluster, issued: list[Issued], prefix_sub: int, key_sub: int, *, lossy: bool
) -> None:
    by_value = {(i.key, i.value): i for i in issued if i.value is not None}
    acked: dict[str, dict[int, bytes | None]] = defaultdict(dict)
    for item in issued:
        done = cluster.results[item.client].get(item.rid)
        if done is None:
            continue
        assert done.status is not KvStatus.TIMEOUT, f"{item} timed out"
        if done.ok:
            prior = acked[item.key].get(done.version, item.value)
            # A resent write is answered with the version it already has: same value.
            assert prior == item.value, f"version {done.version} of {item.key} acked twice"
            acked[item.key][done.version] = item.value

    ring = cluster.stores[STABLE].ring
    final = {}
    for key in KEYS:
        owners = ring.owners(key, 3)
        copies = {o: cluster.stores[o].local_records().get(key) for o in owners}
        distinct = {(r.version, r.value) if r else None for r in copies.values()}
        assert len(distinct) == 1, f"owners of {key} disagree: {copies}"
        record = copies[owners[0]]
        final[key] = record
        if acked[key]:
            top = max(acked[key])
            assert record is not None, f"{key} lost: acked up to version {top}"
            assert record.version >= top, f"{key} at {record.version}, acked {top}"
            if record.version == top:
                assert record.value == acked[key][top]
            elif record.value is not None:
                assert (key, record.value) in by_value, f"{key} holds a value nobody wrote"
        # Non-owners hold no copy once the cluster settled.
        for name in cluster.live():
            if name not in owners:
                assert key not in cluster.stores[name].local_records()

    notes = cluster.notifications[STABLE]
    for sub, keys in ((prefix_sub, KEYS), (key_sub, KEYS[:1])):
        for key in keys:
            seen = [n for n in notes if n.sub_id == sub and n.key == key]
            versions = [n.version for n in seen]
            assert versions == sorted(set(versions)), f"sub {sub} saw {key} out of order: {versions}"
            if lossy:  # a lost notification may leave a hole, but it is reported as skipped
                assert [n.version - n.skipped - 1 for n in seen] == [0, *versions][:-1]
                record = final[key]
                assert (record.version if record else 0) == (versions[-1] if seen else 0)
                continue
            assert all(n.skipped == 0 for n in seen)
            assert [n.version for n in seen] == list(range(1, len(seen) + 1)), (
                f"sub {sub} saw {key} versions {[n.version for n in seen]}"
            )
            record = final[key]
            assert len(seen) == (record.version if record else 0)
            for n in seen:
                if n.version in acked[key]:
                    assert n.value == acked[key][n.version]
            if seen:
                assert seen[-1].value == record.value  # type: ignore[union-attr]


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.integers(0, 2**16), steps)
def test_acknowledged_writes_survive_churn_and_subscribers_see_every_version_in_order(
    seed: int, schedule: list[tuple[object, ...]]
) -> None:
    run_schedule(seed, schedule)


@settings(
    max_examples=max(5, EXAMPLES // 3),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.integers(0, 2**16), steps)
def test_acknowledged_writes_survive_churn_with_five_percent_message_loss(
    seed: int, schedule: list[tuple[object, ...]]
) -> None:
    run_schedule(seed, schedule, drop_rate=0.05)


def test_a_fixed_heavy_schedule_with_crashes_during_writes() -> None:
    schedule: list[tuple[object, ...]] = []
    for round_ in range(6):
        schedule += [("write", i, KEYS[i % 5], "put", 0) for i in range(8)]
        schedule += [("crash", [round_, round_ + 1], 0.2), ("write", 1, KEYS[0], "cas", 2)]
        schedule += [("join",), ("join",), ("run", 0.01)]
    run_schedule(7, schedule)
