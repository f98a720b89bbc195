"""State of the mesh under the names of Ray's state API (`ray.util.state`).

Every function reads the whole mesh through this process's node, which asks each live
member for its part: actors (the row of the node that runs each one wins), nodes, placement
groups, tasks, the objects in the stores, and workers and drivers. Rows are dicts that also read as attributes (`row.state` or
`row["state"]`), with Ray's field names; the `list_*` functions take Ray's `filters`
(`[("state", "=", "ALIVE")]`, `=` or `!=`, strings compared case-insensitively) and `limit`.

What is listed as a task: the tasks and actor calls that finished or failed recently (each
node keeps its last 20,000) and those running now, as the workers report them about once a
second (a task shorter than that may appear only once it ended). Tasks still queued are not
listed: their records live with their owners, not with the nodes.
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Iterable
from typing import Any

from zmesh.runtime import context

DEFAULT_LIMIT = 100
"""As Ray's: how many rows a `list_*` call returns unless told otherwise."""

_ACTOR_STATES = {"pending": "PENDING_CREATION", "alive": "ALIVE", "restarting": "RESTARTING",
                 "dead": "DEAD"}
_TASK_TYPES = {"task": "NORMAL_TASK", "actor_call": "ACTOR_TASK",
               "actor_create": "ACTOR_CREATION_TASK"}

Filter = tuple[str, str, Any]


class StateRow(dict[str, Any]):
    """One row: a dict whose keys also read as attributes, as Ray's state schemas."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def asdict(self) -> dict[str, Any]:
        return dict(self)


def _select(rows: Iterable[dict[str, Any]], filters: list[Filter] | None, limit: int,
            what: str) -> list[StateRow]:
    """Rows that pass every filter, at most `limit` of them (a warning says when more did)."""
    checks = []
    for f in filters or []:
        if not (isinstance(f, tuple | list) and len(f) == 3):
            raise ValueError(f"a filter is (key, '=' or '!=', value), got {f!r}")
        key, op, value = f
        if op not in ("=", "!="):
            raise ValueError(f"filter predicate must be '=' or '!=', got {op!r} in {f!r}")
        checks.append((key, op == "=", _norm(value)))
    out = [StateRow(r) for r in rows
           if all((_norm(r.get(k)) == v) is eq for k, eq, v in checks)]
    if limit is not None and len(out) > limit:
        warnings.warn(f"{len(out)} {what} match; returning the first {limit} (pass limit=...)",
                      stacklevel=3)
        out = out[:limit]
    return out


def _norm(value: Any) -> Any:
    return value.lower() if isinstance(value, str) else (
        str(value).lower() if isinstance(value, bool) else value)


def _check_limit(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ValueError(f"limit must be an int >= 0, got {limit!r}")
    return limit


# -- actors ---------------------------------------------------------------------------------
def _actor_row(actor_id: str, row: dict[str, Any]) -> StateRow:
    state = str(row.get("state", ""))
    namespace = row.get("namespace", "")
    return StateRow({
        "actor_id": actor_id, "class_name": row.get("class_name", ""),
        "state": _ACTOR_STATES.get(state, state.upper()), "name": row.get("name", ""),
        "namespace": namespace, "ray_namespace": namespace,
        "num_restarts": row.get("restarts", 0), "pid": row.get("pid", 0) or None,
        "node_id": row.get("running_on") or None,
        "is_detached": bool(row.get("detached", False))})


def list_actors(address: str | None = None, filters: list[Filter] | None = None,
                limit: int = DEFAULT_LIMIT, timeout: int = 30, detail: bool = False,
                raise_on_missing_output: bool = True, _explain: bool = False
                ) -> list[StateRow]:
    """Every actor of the mesh: actor_id, class_name, state (ALIVE, DEAD, ...), name,
    ray_namespace, node_id and pid of the worker running it, num_restarts, is_detached."""
    table = context.current_client().query("actors_mesh")
    rows = [_actor_row(aid, row) for aid, row in sorted(table.items())]
    return _select(rows, filters, _check_limit(limit), "actors")


def get_actor(id: str | bytes, address: str | None = None, timeout: int = 30,
              _explain: bool = False) -> StateRow | None:
    """One actor's row (as in `list_actors`), or None when no node of the mesh knows it."""
    key = id.hex() if isinstance(id, bytes) else str(id)
    row = context.current_client().query("actors_mesh").get(key)
    return None if row is None else _actor_row(key, row)


def summarize_actors(address: str | None = None, timeout: int = 30,
                     raise_on_missing_output: bool = True, _explain: bool = False
                     ) -> dict[str, Any]:
    """Actors counted by class and state, as Ray's `summarize_actors()`."""
    summary: dict[str, dict[str, Any]] = {}
    for row in list_actors(limit=1 << 62):
        entry = summary.setdefault(row["class_name"], {"class_name": row["class_name"],
                                                       "state_counts": Counter()})
        entry["state_counts"][row["state"]] += 1
    for entry in summary.values():
        entry["state_counts"] = dict(entry["state_counts"])
    return {"cluster": {"summary": summary, "total_actors": sum(
        sum(e["state_counts"].values()) for e in summary.values())}}


# -- nodes ----------------------------------------------------------------------------------
def _node_row(row: dict[str, Any]) -> StateRow:
    return StateRow({
        "node_id": row["NodeID"], "node_ip": row.get("NodeManagerAddress", ""),
        "state": "ALIVE" if row.get("Alive") else "DEAD",
        "node_name": row.get("NodeManagerAddress", ""), "address": row.get("Address", ""),
        "resources_total": dict(row.get("Resources") or {}),
        "resources_available": dict(row.get("Available") or {}),
        "labels": dict(row.get("Labels") or {})})


def list_nodes(address: str | None = None, filters: list[Filter] | None = None,
               limit: int = DEFAULT_LIMIT, timeout: int = 30, detail: bool = False,
               raise_on_missing_output: bool = True, _explain: bool = False
               ) -> list[StateRow]:
    """Every member of the mesh: node_id, node_ip, state (ALIVE or DEAD), resources_total,
    labels."""
    rows = [_node_row(r) for r in context.current_client().query("nodes")]
    return _select(rows, filters, _check_limit(limit), "nodes")


def get_node(id: str, address: str | None = None, timeout: int = 30,
             _explain: bool = False) -> StateRow | None:
    """One node's row (as in `list_nodes`), or None."""
    return next((r for r in list_nodes(limit=1 << 62) if r["node_id"] == id), None)


def available_resources_per_node() -> dict[str, dict[str, float]]:
    """Free resources of each live node, by node id."""
    rows = context.current_client().query("nodes")
    return {r["NodeID"]: dict(r["Available"]) for r in rows if r.get("Alive")}


def total_resources_per_node() -> dict[str, dict[str, float]]:
    """Total resources of each live node, by node id."""
    rows = context.current_client().query("nodes")
    return {r["NodeID"]: dict(r["Resources"]) for r in rows if r.get("Alive")}


# -- placement groups -----------------------------------------------------------------------
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


def list_placement_groups(address: str | None = None, filters: list[Filter] | None = None,
                          limit: int = DEFAULT_LIMIT, timeout: int = 30, detail: bool = False,
                          raise_on_missing_output: bool = True, _explain: bool = False
                          ) -> list[StateRow]:
    """Every placement group of the mesh: placement_group_id, name, state (PENDING,
    CREATED, REMOVED, ...), strategy, bundles, stats."""
    table = placement_group_table()
    rows = [dict(row, placement_group_id=pg_id) for pg_id, row in sorted(table.items())]
    return _select(rows, filters, _check_limit(limit), "placement groups")


def get_placement_group(id: str, address: str | None = None, timeout: int = 30,
                        _explain: bool = False) -> StateRow | None:
    """One placement group's row, or None."""
    row = placement_group_table(id)
    return StateRow(row, placement_group_id=id) if row else None


# -- tasks ----------------------------------------------------------------------------------
def _task_rows() -> list[StateRow]:
    by_node = context.current_client().query("tasks_mesh")
    rows = []
    for node_id, part in sorted(by_node.items()):
        ended = set()
        for s in part["done"]:
            ended.add(s["task_id"])
            error = s.get("error") or ""
            rows.append(StateRow({
                "task_id": s["task_id"], "name": s["name"], "func_or_class_name": s["name"],
                "state": "FINISHED" if s["ok"] else "FAILED",
                "type": _TASK_TYPES.get(s["kind"], str(s["kind"]).upper()),
                "node_id": node_id, "worker_pid": s["pid"],
                "start_time_ms": int(s["start"] * 1000), "end_time_ms": int(s["end"] * 1000),
                "error_type": error.split(":", 1)[0] if error else None,
                "error_message": error or None}))
        for s in part["running"]:
            if s["task_id"] in ended:  # (it ended between the worker's two reports)
                continue
            rows.append(StateRow({
                "task_id": s["task_id"], "name": s["name"], "func_or_class_name": s["name"],
                "state": "RUNNING", "type": _TASK_TYPES.get(s["kind"], str(s["kind"]).upper()),
                "node_id": node_id, "worker_pid": s["pid"],
                "start_time_ms": int(s["start"] * 1000), "end_time_ms": None,
                "error_type": None, "error_message": None}))
    rows.sort(key=lambda r: r["start_time_ms"])
    return rows


def list_tasks(address: str | None = None, filters: list[Filter] | None = None,
               limit: int = DEFAULT_LIMIT, timeout: int = 30, detail: bool = False,
               raise_on_missing_output: bool = True, _explain: bool = False
               ) -> list[StateRow]:
    """Tasks and actor calls that run now (RUNNING), finished (FINISHED) or failed (FAILED)
    recently, oldest first: task_id, name, type (NORMAL_TASK, ACTOR_TASK,
    ACTOR_CREATION_TASK), node_id, worker_pid, start/end_time_ms, error_type and
    error_message. Queued work is not listed (see the module's docstring)."""
    return _select(_task_rows(), filters, _check_limit(limit), "tasks")


def get_task(id: str, address: str | None = None, timeout: int = 30,
             _explain: bool = False) -> StateRow | None:
    """The latest recorded attempt of one task (as in `list_tasks`), or None."""
    key = id.hex() if isinstance(id, bytes) else str(id)
    found = [r for r in _task_rows() if r["task_id"] == key]
    return found[-1] if found else None


def summarize_tasks(address: str | None = None, timeout: int = 30,
                    raise_on_missing_output: bool = True, _explain: bool = False
                    ) -> dict[str, Any]:
    """The recorded tasks counted by name and state, as Ray's `summarize_tasks()`."""
    summary: dict[str, dict[str, Any]] = {}
    for row in _task_rows():
        entry = summary.setdefault(row["name"], {"func_or_class_name": row["name"],
                                                 "type": row["type"],
                                                 "state_counts": Counter()})
        entry["state_counts"][row["state"]] += 1
    for entry in summary.values():
        entry["state_counts"] = dict(entry["state_counts"])
    return {"cluster": {"summary": summary, "total_tasks": sum(
        sum(e["state_counts"].values()) for e in summary.values())}}


# -- objects and workers ----------------------------------------------------------------------
def list_objects(address: str | None = None, filters: list[Filter] | None = None,
                 limit: int = DEFAULT_LIMIT, timeout: int = 30, detail: bool = False,
                 raise_on_missing_output: bool = True, _explain: bool = False
                 ) -> list[StateRow]:
    """The objects in the nodes' shared-memory stores (large values; small ones live inside
    their owners and are not listed): object_id, object_size, node_id, owner (its owner's
    address), state (SEALED, WRITING or SPILLED), is_primary_copy, pinned_by."""
    by_node = context.current_client().query("objects_mesh")
    rows = [{"object_id": o["object_id"], "object_size": o["size"], "node_id": node_id,
             "owner": o["owner"], "state": str(o["state"]).upper(),
             "is_primary_copy": o["copy"] == "primary", "pinned_by": list(o["pinned_by"])}
            for node_id, objects in sorted(by_node.items()) for o in objects]
    return _select(rows, filters, _check_limit(limit), "objects")


def list_workers(address: str | None = None, filters: list[Filter] | None = None,
                 limit: int = DEFAULT_LIMIT, timeout: int = 30, detail: bool = False,
                 raise_on_missing_output: bool = True, _explain: bool = False
                 ) -> list[StateRow]:
    """Every node's worker processes and the drivers connected to it: worker_id, pid,
    node_id, worker_type (WORKER or DRIVER), state (STARTING, IDLE, LEASED, ACTOR; a
    driver's is ALIVE), is_alive, actor_id (the actor a worker runs, else None)."""
    by_node = context.current_client().query("workers_mesh")
    rows = [{"worker_id": w["worker_id"] or None, "pid": w["pid"], "node_id": node_id,
             "worker_type": "DRIVER" if w["kind"] == "driver" else "WORKER",
             "state": "ALIVE" if w["kind"] == "driver" else str(w["state"]).upper(),
             "is_alive": w["state"] != "dead", "actor_id": w["actor_id"] or None}
            for node_id, workers in sorted(by_node.items()) for w in workers]
    return _select(rows, filters, _check_limit(limit), "workers")


__all__ = ["StateRow", "available_resources_per_node", "get_actor", "get_node",
           "get_placement_group", "get_task", "list_actors", "list_nodes", "list_objects",
           "list_placement_groups", "list_tasks", "list_workers", "placement_group_table", "summarize_actors",
           "summarize_tasks", "total_resources_per_node"]
