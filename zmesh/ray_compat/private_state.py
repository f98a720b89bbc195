"""`ray._private.state` in Ray-compat mode: thin aliases of zmesh.util.state.

Libraries call `ray._private.state.available_resources_per_node()` and
`ray._private.state.state.placement_group_table(pg_id)`; both read zmesh's public state API.
"""

from __future__ import annotations

from typing import Any

from zmesh.util.state import available_resources_per_node, placement_group_table


class _GlobalState:
    """The `state` object of `ray._private.state`, as far as libraries use it."""

    def placement_group_table(self, placement_group_id: Any = None) -> dict[str, Any]:
        return placement_group_table(placement_group_id)

    def available_resources_per_node(self) -> dict[str, dict[str, float]]:
        return available_resources_per_node()


state = _GlobalState()

__all__ = ["available_resources_per_node", "placement_group_table", "state"]
