"""Meeting point of a group's members: a torch Store kept in the mesh's user KV (no port
opened, no user-chosen ports; every access goes over the mesh's authenticated links)."""

from __future__ import annotations

from typing import Any

KEY_PREFIX = "zmesh/collective/"


def store_prefix(group_name: str, nonce: str) -> str:
    return f"{KEY_PREFIX}{group_name}/{nonce}/store/"


def open_store(group_name: str, nonce: str, rank: int, world_size: int,
               timeout_s: float) -> Any:
    """The group's store (the same keys for every member; rank and size are gloo's)."""
    from zmesh.collective.store import MeshStore

    return MeshStore(store_prefix(group_name, nonce), timeout_s)


def forget(group_name: str, nonce: str) -> None:
    """Remove the group's keys (rank 0, when the group is destroyed)."""
    from zmesh.collective.store import MeshStore

    try:
        MeshStore(store_prefix(group_name, nonce), 1.0).clear()
    except Exception:  # noqa: BLE001 - the mesh may already be gone at shutdown
        pass
