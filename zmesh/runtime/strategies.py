"""Scheduling strategies on the wire: the user's strategy object <-> the scheduler's."""

from __future__ import annotations

from typing import Any

import msgspec

from zmesh.core.scheduling import (
    DEFAULT,
    NodeAffinity,
    PlacementGroupTarget,
    SpreadStrategy,
    Strategy,
)


def encode_strategy(strategy: Any, *, pg_default: Any = None) -> bytes:
    """Bytes for a user-facing strategy ("DEFAULT", "SPREAD", or a strategy object)."""
    if strategy is None or strategy == "DEFAULT":
        return b""
    if strategy == "SPREAD":
        return msgspec.msgpack.encode(["spread"])
    kind = type(strategy).__name__
    if kind == "PlacementGroupSchedulingStrategy":
        pg = strategy.placement_group
        if pg is None:  # as Ray: no group (the way out of a parent's captured group)
            return b""
        check_bundle_index(pg, strategy.placement_group_bundle_index)
        # the capture flag and the bundles travel along, for the work's own children
        return msgspec.msgpack.encode(["pg", pg.id.hex(), int(strategy.placement_group_bundle_index),
                                       bool(strategy.placement_group_capture_child_tasks),
                                       list(pg.bundle_specs)])
    if kind == "NodeAffinitySchedulingStrategy":
        return msgspec.msgpack.encode(["node", str(strategy.node_id), bool(strategy.soft)])
    raise ValueError(f"unknown scheduling_strategy {strategy!r}: use 'DEFAULT', 'SPREAD', "
                     "PlacementGroupSchedulingStrategy or NodeAffinitySchedulingStrategy")


def check_bundle_index(pg: Any, index: int) -> None:
    """Ray's check_placement_group_index: -1 (any bundle) or 0..bundle_count-1."""
    if not isinstance(index, int) or isinstance(index, bool):
        raise TypeError(f"placement_group_bundle_index must be an int, got {index!r}")
    count = pg.bundle_count
    if index < -1 or (count and index >= count):
        raise ValueError(f"placement group bundle index {index} is invalid: valid indexes are "
                         f"0-{count - 1} (or -1 for any bundle)")


def placement_of(data: bytes) -> tuple[tuple[bytes, list[Any]] | None, bytes]:
    """((group id, its bundles), the strategy its children inherit or b"") for work placed
    with these strategy bytes; (None, b"") outside a group. zmesh.util makes the handle."""
    if not data:
        return None, b""
    parts = msgspec.msgpack.decode(data)
    if parts[0] != "pg":
        return None, b""
    bundles = list(parts[4]) if len(parts) > 4 else []
    pg = (bytes.fromhex(parts[1]), bundles)
    capture = len(parts) > 3 and bool(parts[3])
    inherited = msgspec.msgpack.encode(["pg", parts[1], -1, True, bundles]) if capture else b""
    return pg, inherited


def decode_strategy(data: bytes) -> Strategy:
    """The scheduler's strategy for bytes made by encode_strategy."""
    if not data:
        return DEFAULT
    parts = msgspec.msgpack.decode(data)
    if parts[0] == "spread":
        return SpreadStrategy()
    if parts[0] == "pg":
        return PlacementGroupTarget(str(parts[1]), int(parts[2]))
    if parts[0] == "node":
        return NodeAffinity(parts[1], bool(parts[2]))
    raise ValueError(f"unknown strategy {parts[0]!r}")
