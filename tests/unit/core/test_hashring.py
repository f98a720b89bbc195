"""The consistent-hash ring: deterministic owners, balance, and minimal movement."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zmesh.core.hashring import HashRing

KEYS = [f"actor/{i}" for i in range(20_000)]


def members(n: int) -> list[str]:
    return [f"node-{i}" for i in range(n)]


def test_owners_are_distinct_and_start_with_the_primary() -> None:
    ring = HashRing(members(5))
    for key in KEYS[:500]:
        owners = ring.owners(key, 3)
        assert len(owners) == len(set(owners)) == 3
        assert owners[0] == ring.primary(key)


def test_owners_are_capped_by_the_member_count() -> None:
    ring = HashRing(members(2))
    assert sorted(ring.owners("kv/a", 3)) == ["node-0", "node-1"]


def test_owners_do_not_depend_on_member_order_or_process() -> None:
    a = HashRing(["x", "y", "z"])
    b = HashRing(["z", "x", "y"])
    assert [a.owners(k, 3) for k in KEYS[:200]] == [b.owners(k, 3) for k in KEYS[:200]]
    # blake2b, not the salted builtin hash: a fixed key has a fixed primary everywhere.
    assert HashRing(["x", "y", "z"]).primary("named/default/trainer") == a.primary(
        "named/default/trainer"
    )


@pytest.mark.parametrize("n", [3, 10, 50])
def test_virtual_nodes_keep_the_max_min_load_ratio_bounded(n: int) -> None:
    ring = HashRing(members(n))
    load = Counter(ring.primary(k) for k in KEYS)
    assert set(load) == set(members(n)), "every member owns some keys"
    assert max(load.values()) / min(load.values()) < 2.0


def test_one_virtual_node_is_far_less_balanced_than_the_default() -> None:
    # Guards that virtual nodes are what does the balancing.
    def ratio(ring: HashRing) -> float:
        load = Counter(ring.primary(k) for k in KEYS)
        return max(load.values()) / max(1, min(load.values()))

    assert ratio(HashRing(members(10), vnodes=1)) > 2 * ratio(HashRing(members(10)))


@pytest.mark.parametrize("n", [4, 10, 20])
def test_a_join_moves_about_one_nth_of_the_keys_and_only_to_the_newcomer(n: int) -> None:
    before = HashRing(members(n))
    after = before.with_members([*members(n), "newcomer"])
    moved = [k for k in KEYS if before.primary(k) != after.primary(k)]
    assert all(after.primary(k) == "newcomer" for k in moved)
    share = len(moved) / len(KEYS)
    assert 0.5 / (n + 1) < share < 1.6 / (n + 1)


def test_a_leave_moves_only_the_leavers_keys() -> None:
    before = HashRing(members(8))
    after = before.with_members(members(8)[1:])
    for key in KEYS[:5000]:
        if before.primary(key) != "node-0":
            assert after.primary(key) == before.primary(key)


@settings(max_examples=30, deadline=None)
@given(
    st.sets(st.text(min_size=1, max_size=8), min_size=1, max_size=8),
    st.text(max_size=20),
    st.integers(1, 5),
)
def test_replicas_survive_removing_other_members(names: set[str], key: str, r: int) -> None:
    ring = HashRing(names, vnodes=16)
    owners = ring.owners(key, r)
    # Removing a non-owner never changes the owner list.
    for other in names - set(owners):
        assert ring.with_members(names - {other}).owners(key, r) == owners


def test_bad_arguments_are_refused_with_a_clear_message() -> None:
    with pytest.raises(ValueError, match="vnodes"):
        HashRing(["a"], vnodes=0)
    with pytest.raises(ValueError, match="non-empty strings"):
        HashRing(["a", ""])
    with pytest.raises(LookupError, match="no members"):
        HashRing().primary("kv/x")
    with pytest.raises(ValueError, match="at least 1"):
        HashRing(["a"]).owners("kv/x", 0)
