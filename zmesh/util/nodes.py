"""Node-level helpers under Ray's names: `get_node_ip_address`, `list_named_actors`."""

from __future__ import annotations

import socket
from typing import Any

from zmesh.runtime import context


def get_node_ip_address(address: str = "8.8.8.8:53") -> str:
    """The IP address of this process's node (of this machine before init)."""
    client = context.maybe_client()
    if client is not None:
        node = client.query("node")
        host = str(node.get("address", "")).removeprefix("tcp://").rpartition(":")[0]
        if host and host not in ("0.0.0.0", "*"):
            return host
    host, _, port = address.rpartition(":")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect((host, int(port)))  # UDP: no packet is sent; picks the outbound address
            return str(s.getsockname()[0])
        except OSError:
            return "127.0.0.1"


def list_named_actors(all_namespaces: bool = False) -> list[Any]:
    """Names of the live named actors in this job's namespace, or with all_namespaces,
    dicts {"name", "namespace"} for every namespace (as Ray returns them)."""
    from zmesh.runtime.node.query import query_node

    client = context.current_client()
    found: dict[str, dict[str, str]] = {}
    answers = [client.query("actors")]
    own = client.query("node")["node_id"]
    for node in client.query("nodes"):
        if node.get("NodeID") != own and node.get("Alive"):
            try:
                answers.append(query_node(node["Address"], "actors"))
            except Exception:  # noqa: BLE001 - a node that does not answer lists nothing
                continue
    for actors in answers:
        for actor_id, info in actors.items():
            if info.get("name") and info.get("state") != "dead":
                found[actor_id] = {"name": info["name"],
                                   "namespace": info.get("namespace", "")}
    entries = sorted(found.values(), key=lambda e: (e["namespace"], e["name"]))
    if all_namespaces:
        return entries
    return [e["name"] for e in entries if e["namespace"] == client.namespace]
