"""The producer side: tensors kept where they are, and a server that sends them.

A process that returns tensors from a `tensor_transport` method keeps them here under a
key, and opens (once) an inbox: a torch TCPStore on a port the OS picks. A consumer joins
through the inbox; each joined consumer gets a 2-rank process group (over a prefix of the
inbox store) and a thread here that answers its requests in order: look the key up, say
"ok" (or why not), then send the tensors with torch.distributed.
"""

from __future__ import annotations

import datetime
import itertools
import os
import threading
from typing import Any

STORE_TIMEOUT_S = 300.0


class KeptTensors:
    """Tensors this process produced and still lends out, by key (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: dict[str, list[Any]] = {}
        self._inbox: Any = None
        self.address = ""
        self.sent_bytes = 0

    def keep(self, key: str, tensors: list[Any]) -> None:
        with self._lock:
            self._kept[key] = tensors

    def get(self, key: str) -> list[Any] | None:
        with self._lock:
            return self._kept.get(key)

    def drop(self, key: str) -> None:
        """The last ref anywhere went: free the tensors (device memory too)."""
        with self._lock:
            self._kept.pop(key, None)

    def count(self) -> int:
        with self._lock:
            return len(self._kept)

    def inbox(self, backend: str) -> str:
        """host:port of this process's inbox, opened on first use."""
        with self._lock:
            if self._inbox is None:
                import torch.distributed as dist

                from zmesh.util.nodes import get_node_ip_address

                host = get_node_ip_address()
                self._inbox = dist.TCPStore(  # type: ignore[attr-defined]
                    host, 0, None, True, wait_for_workers=False,
                    timeout=datetime.timedelta(seconds=STORE_TIMEOUT_S))
                self.address = f"{host}:{self._inbox.port}"
                threading.Thread(target=self._accept, args=(backend,), daemon=True,
                                 name="tensor-transport-inbox").start()
            return self.address

    def _accept(self, backend: str) -> None:
        store = self._inbox.clone()
        for n in itertools.count():
            try:
                store.wait([f"join/{n}"], datetime.timedelta(days=365))
            except Exception:  # noqa: BLE001 - the store closes when the process exits
                return
            threading.Thread(target=self._serve, args=(store.clone(), n, backend),
                             daemon=True, name=f"tensor-transport-{n}").start()

    def _serve(self, store: Any, n: int, backend: str) -> None:
        import torch.distributed as dist

        prefix = dist.PrefixStore(f"pair/{n}/", store)  # type: ignore[attr-defined]
        pg = _pair_group(prefix, 0, backend)
        for k in itertools.count():
            try:
                key = prefix.get(f"req/{k}").decode()
            except Exception:  # noqa: BLE001 - the consumer went away
                return
            tensors = self.get(key)
            if tensors is None:
                prefix.set(f"resp/{k}", "gone: the tensors were freed (no ref was left)")
                continue
            prefix.set(f"resp/{k}", "ok")
            try:
                for i, t in enumerate(tensors):
                    pg.send([t], 1, i).wait()
                    self.sent_bytes += t.numel() * t.element_size()
            except Exception:  # noqa: BLE001 - the consumer died midway
                return


def _pair_group(store: Any, rank: int, backend: str) -> Any:
    import torch.distributed as dist

    timeout = datetime.timedelta(seconds=STORE_TIMEOUT_S)
    if backend == "nccl":
        return dist.ProcessGroupNCCL(store, rank, 2, dist.ProcessGroupNCCL.Options())
    return dist.ProcessGroupGloo(store, rank, 2, timeout)


KEPT = KeptTensors()
PROCESS_TOKEN = f"{os.getpid()}-{os.urandom(6).hex()}"
