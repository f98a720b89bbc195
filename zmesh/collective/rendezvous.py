"""Meeting point of a group's members: a torch TCPStore that rank 0 opens on a port the OS
picks, announced to the others through the mesh's user KV (no user-chosen ports)."""

from __future__ import annotations

import datetime
from typing import Any

from zmesh.util import kv

KEY_PREFIX = "zmesh/collective/"


def store_key(group_name: str, nonce: str) -> str:
    return f"{KEY_PREFIX}{group_name}/{nonce}/store"


def open_store(group_name: str, nonce: str, rank: int, world_size: int,
               timeout_s: float) -> Any:
    """The group's TCPStore: rank 0 serves it, the others connect once it is announced."""
    import torch.distributed as dist

    from zmesh.util.nodes import get_node_ip_address

    timeout = datetime.timedelta(seconds=timeout_s)
    key = store_key(group_name, nonce)
    if rank == 0:
        host = get_node_ip_address()
        store = dist.TCPStore(  # type: ignore[attr-defined]
            host, 0, world_size, True, wait_for_workers=False, timeout=timeout)
        kv.kv_put(key, f"{host}:{store.port}".encode())
        return store
    host, _, port = kv.kv_wait(key, timeout=timeout_s).decode().rpartition(":")
    return dist.TCPStore(  # type: ignore[attr-defined]
        host, int(port), world_size, False, timeout=timeout)


def forget(group_name: str, nonce: str) -> None:
    """Remove the announcement (rank 0, when the group is destroyed)."""
    try:
        kv.kv_delete(store_key(group_name, nonce))
    except Exception:  # noqa: BLE001 - the mesh may already be gone at shutdown
        pass
