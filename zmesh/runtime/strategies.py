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
        from zmesh.util.placement_group import check_bundle_index

        pg = strategy.placement_group
        check_bundle_index(pg, strategy.placement_group_bundle_index)
        # the capture flag and the bundles travel along, for the work's own children
        return msgspec.msgpack.encode(["pg", pg.id.hex(), int(strategy.placement_group_bundle_index),
                                       bool(strategy.placement_group_capture_child_tasks),
                                       list(pg.bundle_specs)])
    if kind == "NodeAffinitySchedulingStrategy":
        return msgspec.msgpack.encode(["node", str(strategy.node_id), bool(strategy.soft)])
    raise ValueError(f"unknown scheduling_strategy {strategy!r}: use 'DEFAULT', 'SPREAD', "
                     "PlacementGroupSchedulingStrategy or NodeAffinitySchedulingStrategy")


def placement_of(data: bytes) -> tuple[Any, bytes]:
    """(the placement group, the strategy its children inherit or b"") for work placed with
    these strategy bytes; (None, b"") outside a group."""
    if not data:
        return None, b""
    parts = msgspec.msgpack.decode(data)
    if parts[0] != "pg":
        return None, b""
    from zmesh.util.placement_group import PlacementGroup

    bundles = list(parts[4]) if len(parts) > 4 else []
    pg = PlacementGroup(bytes.fromhex(parts[1]), bundles, None)
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
