"""Scheduling strategies: place work in a placement group bundle or on a given node.

Plain classes, as Ray's are: two strategies are equal only when they are the same object,
and any strategy can be hashed (a dict keyed by strategy, or a set of them, works as in Ray).
"""

from __future__ import annotations

from typing import Any


class PlacementGroupSchedulingStrategy:
    """Run inside `placement_group`, in bundle `placement_group_bundle_index` (-1: any);
    with `placement_group_capture_child_tasks`, the work's own children run in it too."""

    def __init__(self, placement_group: Any, placement_group_bundle_index: int = -1,
                 placement_group_capture_child_tasks: bool | None = None) -> None:
        self.placement_group = placement_group
        self.placement_group_bundle_index = placement_group_bundle_index
        self.placement_group_capture_child_tasks = placement_group_capture_child_tasks

    def __repr__(self) -> str:
        return (f"PlacementGroupSchedulingStrategy(placement_group={self.placement_group!r}, "
                f"placement_group_bundle_index={self.placement_group_bundle_index!r}, "
                "placement_group_capture_child_tasks="
                f"{self.placement_group_capture_child_tasks!r})")


class NodeAffinitySchedulingStrategy:
    """Run on the node `node_id` (its hex id, or an id object with `.hex()`, as Ray takes);
    `soft=True` runs the work elsewhere when that node is gone or cannot ever fit it."""

    def __init__(self, node_id: Any, soft: bool = False, _spill_on_unavailable: bool = False,
                 _fail_on_unavailable: bool = False) -> None:
        if not isinstance(node_id, str):
            hexed = getattr(node_id, "hex", None)
            if not callable(hexed):
                raise TypeError("NodeAffinitySchedulingStrategy: node_id must be a node's hex "
                                f"id (a str, as ray.get_runtime_context().get_node_id() "
                                f"gives), got {type(node_id).__name__} {node_id!r}")
            node_id = hexed()
        if not node_id:
            raise ValueError("NodeAffinitySchedulingStrategy: node_id is empty; zmesh.nodes() "
                             "lists the mesh's node ids")
        if _spill_on_unavailable and not soft:
            raise ValueError("_spill_on_unavailable cannot be set when soft is False. Please "
                             "set soft to True to use _spill_on_unavailable.")
        if _fail_on_unavailable and soft:
            raise ValueError("_fail_on_unavailable cannot be set when soft is True. Please "
                             "set soft to False to use _fail_on_unavailable.")
        self.node_id: str = node_id
        self.soft = soft
        self._spill_on_unavailable = _spill_on_unavailable
        self._fail_on_unavailable = _fail_on_unavailable

    def __repr__(self) -> str:
        return f"NodeAffinitySchedulingStrategy(node_id={self.node_id!r}, soft={self.soft!r})"


__all__ = ["NodeAffinitySchedulingStrategy", "PlacementGroupSchedulingStrategy"]
