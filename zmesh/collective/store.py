"""A torch.distributed Store kept in the mesh's user KV, so that rendezvous opens no port.

torch's TCPStore is a listening socket with no authentication: any local user (any host,
when bound to a routable address) could read or write a group's keys, or join it. This
store instead sends every operation to this process's zmesh node, over the mesh's own
authenticated connection, into the replicated control store (keys under `prefix`). gloo
and NCCL only need set/get/wait/check (and add, compare_set for some paths): they work
over it unchanged. Blocking reads poll with a short back-off, as the KV has no watch for
clients yet; that costs a few milliseconds while a group forms, nothing after.

Still unauthenticated, and not ours to change: the data connections gloo and NCCL open
between members once they have met (see docs/collective.md).
"""

from __future__ import annotations

import datetime
import time
from typing import Any

import torch.distributed as dist

from zmesh.util import kv

POLL_MIN_S = 0.001
POLL_MAX_S = 0.02


class MeshStore(dist.Store):  # type: ignore[misc,name-defined]
    """The keys of one rendezvous (group or pair), under `prefix` in the user KV."""

    def __init__(self, prefix: str, timeout_s: float) -> None:
        super().__init__()
        if not prefix.endswith("/"):
            raise ValueError(f"a MeshStore prefix must end with '/', got {prefix!r}")
        self.prefix = prefix
        self.timeout_s = timeout_s

    # -- the Store interface -----------------------------------------------------------------
    def set(self, key: str, value: Any) -> None:
        kv.kv_put(self.prefix + key, _bytes(value))

    def get(self, key: str) -> bytes:
        return self._wait_one(key, self.timeout_s)

    def add(self, key: str, amount: int) -> int:
        return kv.kv_add(self.prefix + key, int(amount))

    def compare_set(self, key: str, expected: Any, desired: Any) -> bytes:
        return kv.kv_compare_set(self.prefix + key, _bytes(expected), _bytes(desired))

    def wait(self, keys: list[str], timeout: datetime.timedelta | None = None) -> None:
        limit = self.timeout_s if timeout is None else timeout.total_seconds()
        deadline = time.monotonic() + limit
        for key in keys:
            self._wait_one(key, max(0.0, deadline - time.monotonic()))

    def check(self, keys: list[str]) -> bool:
        return all(kv.kv_get(self.prefix + k) is not None for k in keys)

    def delete_key(self, key: str) -> bool:
        return kv.kv_delete(self.prefix + key)

    def num_keys(self) -> int:
        return len(kv.kv_list(self.prefix))

    def set_timeout(self, timeout: datetime.timedelta) -> None:
        self.timeout_s = timeout.total_seconds()

    # -- ours --------------------------------------------------------------------------------
    def peek(self, key: str) -> bytes | None:
        """The value under `key` now, or None (never waits)."""
        return kv.kv_get(self.prefix + key)

    def clear(self) -> None:
        """Delete every key of this rendezvous (when the group or pair is gone)."""
        for key in kv.kv_list(self.prefix):
            kv.kv_delete(key)

    def _wait_one(self, key: str, timeout_s: float) -> bytes:
        deadline = time.monotonic() + timeout_s
        pause = POLL_MIN_S
        while True:
            value = kv.kv_get(self.prefix + key)
            if value is not None:
                return value
            left = deadline - time.monotonic()
            if left <= 0:
                # torch turns this into the collective's error (a DistStoreError for its own)
                raise TimeoutError(f"no value appeared under {self.prefix + key!r} in the "
                                   f"mesh's KV within {timeout_s:g}s (a member never came?)")
            time.sleep(min(pause, left))  # no watch for clients yet: poll, backing off
            pause = min(pause * 2, POLL_MAX_S)


def _bytes(value: Any) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)
