"""zmesh.util: placement groups, scheduling strategies, ActorPool, as_completed and the
other helpers of Ray's `ray.util`, under Ray's names (`zmesh.util.queue.Queue` and
`zmesh.util.multiprocessing.Pool` are submodules, as in Ray)."""

from zmesh.util import kv, scheduling_strategies, state
from zmesh.util.actor_pool import ActorPool
from zmesh.util.inspect import inspect_serializability
from zmesh.util.iterators import as_completed, map_unordered
from zmesh.util.nodes import get_node_ip_address, list_named_actors
from zmesh.util.placement_group import (
    PlacementGroup,
    get_current_placement_group,
    placement_group,
    placement_group_table,
    remove_placement_group,
)

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
