"""zmesh.util: placement groups and scheduling strategies, under Ray's names."""

from zmesh.util import scheduling_strategies
from zmesh.util.placement_group import (
    PlacementGroup,
    get_current_placement_group,
    placement_group,
    placement_group_table,
    remove_placement_group,
)

__all__ = [
    "PlacementGroup",
    "get_current_placement_group",
    "placement_group",
    "placement_group_table",
    "remove_placement_group",
    "scheduling_strategies",
]
