"""Scheduling strategy objects behave as Ray's: identity equality, hashable, node ids from
id objects via .hex(), and Ray's checks on the private spill/fail flags."""

from __future__ import annotations

import pytest

from zmesh.runtime.strategies import decode_strategy, encode_strategy
from zmesh.util.scheduling_strategies import (
    NodeAffinitySchedulingStrategy,
    PlacementGroupSchedulingStrategy,
)


class _Id:
    def hex(self) -> str:
        return "ab" * 14


def test_strategies_hash_and_compare_by_identity() -> None:
    a = NodeAffinitySchedulingStrategy("ab" * 14, soft=True)
    b = NodeAffinitySchedulingStrategy("ab" * 14, soft=True)
    assert a == a and a != b  # as Ray: no field equality
    assert len({a, b}) == 2
    pg = PlacementGroupSchedulingStrategy(object(), 0)
    assert {pg: 1}[pg] == 1


def test_node_id_object_is_hexed_and_encoded() -> None:
    s = NodeAffinitySchedulingStrategy(_Id(), soft=False)
    assert s.node_id == "ab" * 14
    target = decode_strategy(encode_strategy(s))
    assert target.node_id == "ab" * 14  # type: ignore[attr-defined]


def test_bad_node_ids_and_flag_combinations_are_refused() -> None:
    with pytest.raises(TypeError, match="node_id"):
        NodeAffinitySchedulingStrategy(123, soft=True)
    with pytest.raises(ValueError, match="empty"):
        NodeAffinitySchedulingStrategy("", soft=True)
    with pytest.raises(ValueError, match="_spill_on_unavailable"):
        NodeAffinitySchedulingStrategy("ab" * 14, soft=False, _spill_on_unavailable=True)
    with pytest.raises(ValueError, match="_fail_on_unavailable"):
        NodeAffinitySchedulingStrategy("ab" * 14, soft=True, _fail_on_unavailable=True)
