"""What the dashboard shows, gathered from every live member through one querier."""

from __future__ import annotations

import threading
from typing import Any

import msgspec

from zmesh.errors import ZmeshError
from zmesh.runtime.mesh_cli import actor_rows, entry_address
from zmesh.runtime.node.query import NodeQuerier
from zmesh.security.keys import ClusterCredentials

#: recent failed tasks shown, newest first
FAILED_SHOWN = 50


class MeshReader:
    """A thread-safe reader of the mesh's state through any one member."""

    def __init__(self, address: str | None,
                 credentials: ClusterCredentials | None = None) -> None:
        self.address = address
        self._credentials = credentials
        self._lock = threading.Lock()
        self._querier: NodeQuerier | None = None

    def _q(self) -> NodeQuerier:
        if self._querier is None:
            self._querier = NodeQuerier(credentials=self._credentials)
        return self._querier

    def close(self) -> None:
        with self._lock:
            if self._querier is not None:
                self._querier.close()
                self._querier = None

    def _ask(self, address: str, what: str, arg: bytes = b"") -> Any:
        try:
            return self._q().query(address, what, arg, timeout=3.0)
        except ZmeshError as exc:
            return {"error": str(exc)}

    def members(self) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = self._q().query(entry_address(self.address), "nodes",
                                                     timeout=3.0)
        return rows

    def state(self) -> dict[str, Any]:
        """Members, actors, tasks (pending, running, failed), objects and groups."""
        with self._lock:
            members = self.members()
            per_node: dict[str, dict[str, Any]] = {}
            for row in members:
                if row["Alive"]:
                    per_node[row["NodeID"]] = {
                        what: self._ask(row["Address"], what)
                        for what in ("actors", "pending", "leases", "store",
                                     "placement_groups", "timeline")}
        pending, running, failed, groups, stores = [], [], [], [], []
        for node_id, got in per_node.items():
            for p in _list(got["pending"]):
                pending.append({"node_id": node_id, **p})
            for le in _list(got["leases"]):
                if le.get("state") == "granted":
                    running.append({"node_id": node_id, **le})
            for s in _list(got["timeline"]):
                if not s["ok"]:
                    failed.append(s)
            pgs = got["placement_groups"]
            for pg in (pgs.values() if isinstance(pgs, dict) and "error" not in pgs else []):
                groups.append({"node_id": node_id, **pg})
            st = got["store"]
            stores.append({"node_id": node_id, **(st if isinstance(st, dict) else {})})
        failed.sort(key=lambda s: -s["end"])
        nodes = [{"node_id": r["NodeID"], "state": r["State"], "address": r["Address"],
                  "resources": r["Resources"], "available": r["Available"],
                  "labels": r["Labels"]} for r in members]
        return {"nodes": nodes, "actors": actor_rows({"per_node": per_node}),
                "pending": pending, "running": running, "failed": failed[:FAILED_SHOWN],
                "objects": stores, "placement_groups": groups}

    def logs(self, node_id: str, selector: dict[str, Any]) -> dict[str, Any]:
        """One node's log lines for an actor name or worker pid (see NodeOps._logs)."""
        with self._lock:
            for row in self.members():
                if row["Alive"] and row["NodeID"] == node_id:
                    got: dict[str, Any] = self._ask(row["Address"], "logs",
                                                    msgspec.msgpack.encode(selector))
                    return got
        return {"error": f"no live node {node_id}"}

    def metrics(self) -> list[dict[str, Any]]:
        """Every live node's counters and gauges (the `metrics` query)."""
        with self._lock:
            out = []
            for row in self.members():
                if row["Alive"]:
                    got = self._ask(row["Address"], "metrics")
                    if "error" not in got:
                        out.append(got)
            return out


def _list(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []
