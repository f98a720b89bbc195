"""Control store semantics on SimNet: get/put/CAS/put-if-absent/delete, listing, subscriptions."""

from __future__ import annotations

import logging

import pytest

from zmesh.protocol import codec
from zmesh.protocol.messages.control import (
    CONTROL_MESSAGES,
    KvPut,
    KvRecord,
    KvStatus,
    OpId,
    WatchState,
)
from zmesh.store.control_requests import Completion
from zmesh.store.control_sim import StoreCluster
from zmesh.store.control_store import ControlStore, StoreConfig


@pytest.fixture
def cluster() -> StoreCluster:
    c = StoreCluster(["a", "b", "c", "d", "e"], seed=1)
    c.settle()
    return c


def put(c: StoreCluster, who: str, key: str, value: bytes, **kw: object) -> Completion:
    return c.wait(who, c.call(who, lambda s, t: s.put(t, key, value, **kw)))  # type: ignore[arg-type]


def get(c: StoreCluster, who: str, key: str) -> Completion:
    return c.wait(who, c.call(who, lambda s, t: s.get(t, key)))


def delete(c: StoreCluster, who: str, key: str, **kw: object) -> Completion:
    return c.wait(who, c.call(who, lambda s, t: s.delete(t, key, **kw)))  # type: ignore[arg-type]


def holders(c: StoreCluster, key: str) -> set[str]:
    return {n for n in c.live() if key in c.stores[n].local_records()}


def test_put_then_get_from_any_member_returns_value_and_version(cluster: StoreCluster) -> None:
    assert put(cluster, "a", "kv/x", b"1").version == 1
    assert put(cluster, "b", "kv/x", b"2").version == 2
    for who in "abcde":
        done = get(cluster, who, "kv/x")
        assert (done.status, done.version, done.value) == (KvStatus.OK, 2, b"2")


def test_get_of_a_missing_key_is_not_found_at_version_zero(cluster: StoreCluster) -> None:
    done = get(cluster, "c", "kv/missing")
    assert (done.status, done.version, done.value) == (KvStatus.NOT_FOUND, 0, None)


def test_compare_and_set_succeeds_only_at_the_expected_version(cluster: StoreCluster) -> None:
    assert put(cluster, "a", "kv/x", b"one", expected_version=0).ok  # 0: never existed
    stale = put(cluster, "b", "kv/x", b"lost", expected_version=0)
    assert (stale.status, stale.version, stale.value) == (KvStatus.CAS_FAILED, 1, b"one")
    assert put(cluster, "b", "kv/x", b"two", expected_version=1).version == 2
    assert get(cluster, "e", "kv/x").value == b"two"


def test_put_if_absent_returns_the_existing_value_to_the_loser(cluster: StoreCluster) -> None:
    rids = {who: cluster.call(who, lambda s, t, w=who: s.put(t, "named/ns/trainer", w.encode(), if_absent=True))
            for who in "abcde"}
    results = {who: cluster.wait(who, rid) for who, rid in rids.items()}
    winners = [w for w, r in results.items() if r.ok]
    assert len(winners) == 1
    for who, r in results.items():
        if who != winners[0]:
            assert (r.status, r.version, r.value) == (KvStatus.EXISTS, 1, winners[0].encode())


def test_delete_leaves_a_tombstone_so_versions_keep_increasing(cluster: StoreCluster) -> None:
    put(cluster, "a", "kv/x", b"1")
    assert delete(cluster, "b", "kv/x").version == 2
    done = get(cluster, "c", "kv/x")
    assert (done.status, done.version) == (KvStatus.NOT_FOUND, 2)
    assert delete(cluster, "b", "kv/x").status is KvStatus.NOT_FOUND
    assert put(cluster, "d", "kv/x", b"again", if_absent=True).version == 3


def test_delete_with_a_stale_expected_version_fails(cluster: StoreCluster) -> None:
    put(cluster, "a", "kv/x", b"1")
    put(cluster, "a", "kv/x", b"2")
    assert delete(cluster, "b", "kv/x", expected_version=1).status is KvStatus.CAS_FAILED
    assert delete(cluster, "b", "kv/x", expected_version=2).ok


def test_list_by_prefix_spans_shards_skips_deleted_and_other_prefixes(cluster: StoreCluster) -> None:
    for i in range(30):
        put(cluster, "a", f"actor/{i:02d}", b"x%d" % i)
    put(cluster, "a", "actors-not/1", b"no")
    put(cluster, "a", "named/actor/1", b"no")
    delete(cluster, "b", "actor/07")
    done = cluster.wait("c", cluster.call("c", lambda s, t: s.list_prefix(t, "actor/")))
    assert [r.key for r in done.records] == [f"actor/{i:02d}" for i in range(30) if i != 7]
    assert len({cluster.stores["a"].ring.primary(r.key) for r in done.records}) > 1


def test_an_acknowledged_write_is_on_every_owner_and_only_there(cluster: StoreCluster) -> None:
    for i in range(20):
        put(cluster, "a", f"kv/{i}", b"v")
        owners = set(cluster.stores["a"].ring.owners(f"kv/{i}", 3))
        assert holders(cluster, f"kv/{i}") == owners


def test_a_write_is_not_acknowledged_while_a_replica_cannot_store_it(cluster: StoreCluster) -> None:
    key = "kv/slow"
    primary, replica, _ = cluster.stores["a"].ring.owners(key, 3)
    cluster.net.partition([primary], [replica])
    rid = cluster.call(primary, lambda s, t: s.put(t, key, b"v"))
    cluster.run_for(1.0)
    assert rid not in cluster.results[primary]
    cluster.net.heal()
    assert cluster.wait(primary, rid).ok  # the primary resends until the replica acks
    assert replica in holders(cluster, key)


def test_a_resent_write_that_already_landed_is_answered_not_applied_twice(
    cluster: StoreCluster,
) -> None:
    key = "kv/x"
    primary = cluster.stores["a"].ring.primary(key)
    msg = KvPut(rid=99, key=key, value=b"once", incarnation=0)
    cluster.net.inject(primary, "a", msg)
    cluster.net.inject(primary, "a", msg, delay=0.5)
    cluster.run_for(1.0)
    assert cluster.stores[primary].local_records()[key].version == 1


def test_versions_continue_on_the_new_primary_after_the_primary_crashes(cluster: StoreCluster) -> None:
    key = "kv/x"
    for i in range(3):
        put(cluster, "a", key, b"%d" % i)
    primary = cluster.stores["a"].ring.primary(key)
    client = next(n for n in "abcde" if n != primary)
    cluster.crash(primary)
    done = put(cluster, client, key, b"after")
    assert done.version == 4
    assert get(cluster, client, key).value == b"after"


def test_a_request_to_a_dead_primary_is_retried_on_the_new_one(cluster: StoreCluster) -> None:
    key = "kv/x"
    put(cluster, "a", key, b"1")
    primary = cluster.stores["a"].ring.primary(key)
    client = next(n for n in "abcde" if n != primary)
    cluster.crash(primary, detect=False)
    rid = cluster.call(client, lambda s, t: s.put(t, key, b"2"))
    cluster.run_for(0.3)
    assert rid not in cluster.results[client]  # the dead primary never answers
    cluster.detect(primary)
    done = cluster.wait(client, rid)
    assert (done.status, done.version) == (KvStatus.OK, 2)


def test_a_joining_member_serves_only_after_the_transfer_and_old_owners_wait_for_its_ack(
    cluster: StoreCluster,
) -> None:
    keys = [f"kv/{i}" for i in range(60)]
    for k in keys:
        put(cluster, "a", k, b"v")
    old_owners = {k: cluster.stores["a"].ring.owners(k, 3) for k in keys}
    cluster.net.partition(["f"], ["a"])  # f will not hear from a until healed
    cluster.join("f")
    new_ring = cluster.stores["b"].ring
    moved = [k for k in keys if new_ring.primary(k) == "f"]
    a_gives_up = [k for k in keys if "a" in old_owners[k] and "a" not in new_ring.owners(k, 3)]
    assert moved and a_gives_up
    rid = cluster.call("b", lambda s, t: s.get(t, moved[0]))
    cluster.run_for(1.0)
    assert not cluster.stores["f"].ready
    assert rid not in cluster.results["b"]  # it waits at f, which still lacks a's handoff
    assert all(k in cluster.stores["a"].local_records() for k in a_gives_up)
    cluster.net.heal()
    assert cluster.wait("b", rid).value == b"v"
    cluster.settle()
    assert not any(k in cluster.stores["a"].local_records() for k in a_gives_up)
    for k in keys:
        assert holders(cluster, k) == set(new_ring.owners(k, 3))


def test_writes_during_joins_and_leaves_all_complete(cluster: StoreCluster) -> None:
    rids = [cluster.call("a", lambda s, t, i=i: s.put(t, f"kv/{i % 7}", b"%d" % i)) for i in range(40)]
    cluster.run_for(0.002)
    cluster.join("f")
    cluster.run_for(0.003)
    cluster.leave("b")
    results = [cluster.wait("a", rid) for rid in rids]
    assert all(r.ok for r in results)
    versions: dict[str, list[int]] = {}
    for r in results:
        versions.setdefault(r.key, []).append(r.version)
    for key, vs in versions.items():
        assert sorted(vs) == list(range(1, len(vs) + 1)), key


def test_a_single_member_store_keeps_one_copy() -> None:
    c = StoreCluster(["solo"])
    c.settle()
    assert put(c, "solo", "kv/x", b"1").version == 1
    assert get(c, "solo", "kv/x").value == b"1"


def test_a_request_with_no_members_times_out() -> None:
    store = ControlStore("lonely", config=StoreConfig(request_timeout=1.0))
    rid = store.get(0.0, "kv/x")
    now = 0.0
    while (deadline := store.next_deadline()) is not None and now < 5:
        now = deadline
        assert store.tick(now) == []
    assert store.drain_completions() == [Completion(rid, "get", "kv/x", KvStatus.TIMEOUT)]


# -- subscriptions ----------------------------------------------------------------------


def test_a_key_subscriber_gets_the_current_value_then_every_change_including_delete(
    cluster: StoreCluster,
) -> None:
    put(cluster, "a", "actor/1", b"starting")
    sub = cluster.call("c", lambda s, t: s.subscribe(t, "actor/1"))
    assert cluster.wait("c", sub).op == "subscribe"
    put(cluster, "a", "actor/1", b"alive")
    delete(cluster, "b", "actor/1")
    put(cluster, "d", "actor/1", b"restarted")
    cluster.run_for(0.1)
    seen = [(n.version, n.value, n.initial) for n in cluster.notifications["c"]]
    assert seen == [(1, b"starting", True), (2, b"alive", False), (3, None, False), (4, b"restarted", False)]


def test_a_prefix_subscriber_sees_each_key_in_version_order(cluster: StoreCluster) -> None:
    sub = cluster.call("e", lambda s, t: s.subscribe(t, "node/", prefix=True))
    cluster.wait("e", sub)
    rids = [cluster.call(w, lambda s, t, i=i: s.put(t, f"node/{i % 4}", b"%d" % i))
            for i, w in enumerate("abcdabcdabcd")]
    for w, rid in zip("abcdabcdabcd", rids):
        cluster.wait(w, rid)
    put(cluster, "a", "other/1", b"not watched")
    cluster.run_for(0.1)
    notes = cluster.notifications["e"]
    assert {n.key for n in notes} == {f"node/{i}" for i in range(4)}
    for i in range(4):
        assert [n.version for n in notes if n.key == f"node/{i}"] == [1, 2, 3]


def test_unsubscribe_stops_notifications(cluster: StoreCluster) -> None:
    sub = cluster.call("c", lambda s, t: s.subscribe(t, "kv/", prefix=True))
    cluster.wait("c", sub)
    put(cluster, "a", "kv/1", b"1")
    cluster.run_for(0.05)
    cluster.call("c", lambda s, t: s.unsubscribe(t, sub) or 0)
    cluster.run_for(0.05)
    put(cluster, "a", "kv/1", b"2")
    cluster.run_for(6.0)  # past a watch resync
    assert [n.version for n in cluster.notifications["c"]] == [1]


def test_a_subscription_follows_its_key_to_a_new_primary_without_gaps(cluster: StoreCluster) -> None:
    key = "actor/7"
    primary = cluster.stores["a"].ring.primary(key)
    watcher = next(n for n in "abcde" if n != primary)
    writer = next(n for n in "abcde" if n not in (primary, watcher))
    cluster.wait(watcher, cluster.call(watcher, lambda s, t: s.subscribe(t, key)))
    rids = [cluster.call(writer, lambda s, t, i=i: s.put(t, key, b"%d" % i)) for i in range(10)]
    cluster.run_for(0.004)
    cluster.crash(primary)
    for rid in rids:
        assert cluster.wait(writer, rid).ok
    put(cluster, writer, key, b"last")
    cluster.run_for(0.1)
    versions = [n.version for n in cluster.notifications[watcher]]
    assert versions == list(range(1, 12))
    assert cluster.notifications[watcher][-1].value == b"last"


# -- validation and wire -------------------------------------------------------------------


def test_bad_arguments_name_what_was_wrong() -> None:
    store = ControlStore("a")
    with pytest.raises(ValueError, match="non-empty strings"):
        store.get(0.0, "")
    with pytest.raises(TypeError, match="value must be bytes, got str"):
        store.put(0.0, "kv/x", "text")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not both"):
        store.put(0.0, "kv/x", b"v", expected_version=1, if_absent=True)
    with pytest.raises(ValueError, match="expected_version"):
        store.delete(0.0, "kv/x", expected_version=-1)
    with pytest.raises(ValueError, match="exceeds"):
        store.put(0.0, "kv/x", bytes(600 * 1024))
    with pytest.raises(KeyError, match="no subscription with id 42"):
        store.unsubscribe(0.0, 42)
    with pytest.raises(ValueError, match="replication"):
        StoreConfig(replication=0)
    with pytest.raises(ValueError, match="member names"):
        store.set_members(0.0, ["a", ""])


def test_every_control_message_survives_the_codec() -> None:
    record = KvRecord("kv/x", 3, b"v", OpId("a", 1, 7))
    samples = {
        "KvGet": dict(rid=1, key="kv/x"),
        "KvPut": dict(rid=1, key="kv/x", value=b"v", expected_version=2),
        "KvDelete": dict(rid=1, key="kv/x"),
        "KvList": dict(rid=1, prefix="kv/", view=2**64 - 1),
        "KvReply": dict(rid=1, status=KvStatus.EXISTS, version=3, value=b"v"),
        "KvListReply": dict(rid=1, view=5, status=KvStatus.OK, records=[record]),
        "Replicate": dict(view=5, record=KvRecord("kv/x", 4, None)),
        "ReplicateAck": dict(view=5, key="kv/x", version=4),
        "Handoff": dict(view=5, part=0, parts=1, records=[record],
                        watches=[WatchState(3, "kv/", True, {"kv/x": 2})]),
        "HandoffAck": dict(view=5, part=0),
        "Subscribe": dict(view=5, watch=WatchState(3, "kv/x", False)),
        "Unsubscribe": dict(sub_id=3),
        "SubSnapshot": dict(view=5, sub_id=3, records=[record]),
        "Notify": dict(sub_id=3, record=record),
    }
    assert {cls.__name__ for cls in CONTROL_MESSAGES} == set(samples)
    for cls in CONTROL_MESSAGES:
        msg = cls(**samples[cls.__name__])
        assert codec.decode(codec.encode(msg)) == msg


def test_a_message_that_is_not_for_the_store_is_dropped_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = ControlStore("a")
    store.set_members(0.0, ["a"])
    with caplog.at_level(logging.WARNING):
        assert store.receive(0.0, "b", object()) == []
    assert "not a control store message" in caplog.text


def test_a_member_paused_through_a_view_change_and_back_hands_its_shards_over_again() -> None:
    # "c" is paused while the others drop it and take it back (a node taken for dead that
    # lives on): its own view never changed, so it never began the view again, and the
    # others waited for its handoff for good (every write whose primary is a or b timed out).
    c = StoreCluster(["a", "b", "c"], seed=2)
    c.settle()
    assert put(c, "a", "kv/before", b"1").ok
    c.members.discard("c")
    for name in ("a", "b"):  # c hears nothing of it
        c.stores[name].set_members(c.now, c.members)
        c._wake(name)
    c.settle()
    for i in range(12):  # written while c is away: c owns some of them in the full view
        assert put(c, "a", f"kv/away{i}", b"new").ok
    assert put(c, "b", "kv/before", b"2").version == 2
    c.members.add("c")
    c._announce()  # (c's own set_members is a no-op: same members as it had)
    c.settle()
    for i in range(12):
        for who in "abc":
            done = put(c, who, f"kv/{who}{i}", b"x")
            assert done.ok, (who, i, done.status)
    for i in range(12):  # c serves, as primary or not, what was written while it was away
        assert put(c, "c", f"kv/away{i}", b"newer").version == 2
        for who in "abc":
            assert (get(c, who, f"kv/away{i}").value, get(c, who, f"kv/away{i}").version) \
                == (b"newer", 2)
    for who in "abc":
        assert get(c, who, "kv/before").value == b"2"
