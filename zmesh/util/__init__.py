"""zmesh.util: placement groups, scheduling strategies, ActorPool, as_completed and the
other helpers of Ray's `ray.util`, under Ray's names (`zmesh.util.queue.Queue` and
`zmesh.util.multiprocessing.Pool` are submodules, as in Ray).

Placement groups and scheduling strategies load with the package (most programs use them);
the other helpers on first use, so `import zmesh` does not pay for them."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from zmesh.util import scheduling_strategies
from zmesh.util.placement_group import (
    PlacementGroup,
    get_current_placement_group,
    placement_group,
    placement_group_table,
    remove_placement_group,
)

if TYPE_CHECKING:
    from zmesh.util import kv, state
    from zmesh.util.actor_pool import ActorPool
    from zmesh.util.inspect import inspect_serializability
    from zmesh.util.iterators import as_completed, map_unordered
    from zmesh.util.nodes import get_node_ip_address, list_named_actors

# name -> (module, attribute; "" for the module itself), loaded on first use
_LAZY = {
    "kv": ("zmesh.util.kv", ""),
    "state": ("zmesh.util.state", ""),
    "ActorPool": ("zmesh.util.actor_pool", "ActorPool"),
    "inspect_serializability": ("zmesh.util.inspect", "inspect_serializability"),
    "as_completed": ("zmesh.util.iterators", "as_completed"),
    "map_unordered": ("zmesh.util.iterators", "map_unordered"),
    "get_node_ip_address": ("zmesh.util.nodes", "get_node_ip_address"),
    "list_named_actors": ("zmesh.util.nodes", "list_named_actors"),
}


def __getattr__(name: str) -> Any:
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module 'zmesh.util' has no attribute {name!r}")
    module = importlib.import_module(where[0])
    value = getattr(module, where[1]) if where[1] else module
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "ActorPool",
    "PlacementGroup",
    "as_completed",
    "get_node_ip_address",
    "inspect_serializability",
    "list_named_actors",
    "map_unordered",
    "get_current_placement_group",
    "kv",
    "placement_group",
    "placement_group_table",
    "remove_placement_group",
    "scheduling_strategies",
    "state",
]
