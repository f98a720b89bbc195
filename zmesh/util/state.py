"""State of the mesh as plain dicts, under the names of Ray's state API.

All of them read the whole mesh: `list_actors()` / `get_actor()` ask this process's node,
which asks every live member for the actors it knows and keeps, for each actor, the row of
the node that runs it (as `zmesh list actors` shows them).
"""

from __future__ import annotations

from typing import Any

from zmesh.runtime import context

_STATES = {"pending": "PENDING_CREATION", "alive": "ALIVE", "restarting": "RESTARTING",
           "dead": "DEAD"}


def _actor_row(actor_id: str, row: dict[str, Any]) -> dict[str, Any]:
    state = str(row.get("state", ""))
    return {"actor_id": actor_id, "class_name": row.get("class_name", ""),
            "state": _STATES.get(state, state.upper()), "name": row.get("name", ""),
            "namespace": row.get("namespace", ""), "num_restarts": row.get("restarts", 0)}


def list_actors() -> list[dict[str, Any]]:
    """Every actor of the mesh: actor_id, class_name, state (ALIVE, DEAD, ...), name."""
    table = context.current_client().query("actors_mesh")
    return [_actor_row(aid, row) for aid, row in sorted(table.items())]


def get_actor(actor_id: str | bytes) -> dict[str, Any] | None:
    """One actor's row (as in `list_actors`), or None when no node of the mesh knows it."""
    key = actor_id.hex() if isinstance(actor_id, bytes) else str(actor_id)
    row = context.current_client().query("actors_mesh").get(key)
    return None if row is None else _actor_row(key, row)


def available_resources_per_node() -> dict[str, dict[str, float]]:
    """Free resources of each live node, by node id."""
    rows = context.current_client().query("nodes")
    return {r["NodeID"]: dict(r["Available"]) for r in rows if r.get("Alive")}


def total_resources_per_node() -> dict[str, dict[str, float]]:
    """Total resources of each live node, by node id."""
    rows = context.current_client().query("nodes")
    return {r["NodeID"]: dict(r["Resources"]) for r in rows if r.get("Alive")}


def placement_group_table(placement_group: Any = None) -> dict[str, Any]:
    """Every placement group by id (hex), or one group's row: a PlacementGroup, its id
    (bytes or hex) or None for all."""
    from zmesh.util.placement_group import PlacementGroup

    table = context.current_client().query("placement_groups")
    if placement_group is None:
        return dict(table)
    pg_id = placement_group.id if isinstance(placement_group, PlacementGroup) else placement_group
    key = pg_id.hex() if isinstance(pg_id, bytes) else str(pg_id)
    return dict(table.get(key, {}))


__all__ = ["available_resources_per_node", "get_actor", "list_actors", "placement_group_table",
           "total_resources_per_node"]
