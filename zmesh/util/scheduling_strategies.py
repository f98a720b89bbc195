"""Scheduling strategies: place work in a placement group bundle or on a given node."""

from __future__ import annotations

from typing import Any

import msgspec


class PlacementGroupSchedulingStrategy(msgspec.Struct, dict=True):
    """Run inside `placement_group`, in bundle `placement_group_bundle_index` (-1: any)."""

    placement_group: Any
    placement_group_bundle_index: int = -1
    placement_group_capture_child_tasks: bool | None = None


class NodeAffinitySchedulingStrategy(msgspec.Struct, dict=True):
    """Run on `node_id`; soft=True falls back to other nodes when it cannot."""

    node_id: str
    soft: bool = False
    _spill_on_unavailable: bool = False
    _fail_on_unavailable: bool = False


__all__ = ["NodeAffinitySchedulingStrategy", "PlacementGroupSchedulingStrategy"]
