"""The consumer side: fetch a producer's tensors straight from it over torch.distributed.

One 2-rank process group per producer, joined through the producer's inbox on first use
and reused after; requests on one pair are serialized (threads of one process share it).
"""

from __future__ import annotations

import datetime
import threading
from typing import Any

from zmesh.tensor_transport.producer import STORE_TIMEOUT_S, _pair_group
from zmesh.tensor_transport.types import TensorTransportError

CONNECT_TIMEOUT_S = 10.0


class _Pair:
    def __init__(self, inbox: str, backend: str) -> None:
        import torch.distributed as dist

        host, _, port = inbox.rpartition(":")
        # a dead producer's inbox refuses connections: give up on it quickly
        store = dist.TCPStore(  # type: ignore[attr-defined]
            host, int(port), None, False, timeout=datetime.timedelta(seconds=CONNECT_TIMEOUT_S))
        store.set_timeout(datetime.timedelta(seconds=STORE_TIMEOUT_S))
        n = store.add("joined", 1) - 1
        store.set(f"join/{n}", "1")
        self.store = dist.PrefixStore(f"pair/{n}/", store)  # type: ignore[attr-defined]
        self.pg = _pair_group(self.store, 1, backend)
        self.next = 0
        self.lock = threading.Lock()


_pairs: dict[tuple[str, str], _Pair] = {}
_pairs_lock = threading.Lock()


def fetch(inbox: str, backend: str, key: str, metas: list[tuple[list[int], str]],
          device: str, producer: str) -> list[Any]:
    """The tensors kept under `key` by the producer at `inbox`, received into new buffers
    (on `device`); TensorTransportError when the producer died or freed them."""
    import torch

    try:
        with _pairs_lock:
            pair = _pairs.get((inbox, backend))
            if pair is None:
                pair = _pairs[(inbox, backend)] = _Pair(inbox, backend)
        out = [torch.empty(shape, dtype=getattr(torch, dtype), device=device)
               for shape, dtype in metas]
        with pair.lock:
            k = pair.next
            pair.next += 1
            pair.store.set(f"req/{k}", key)
            answer = pair.store.get(f"resp/{k}").decode()
            if answer != "ok":
                raise TensorTransportError(f"tensors of {producer} cannot be fetched: {answer}")
            for i, t in enumerate(out):
                pair.pg.recv([t], 0, i).wait()
        return out
    except TensorTransportError:
        raise
    except Exception as exc:  # noqa: BLE001 - torch raises RuntimeError on a lost peer
        with _pairs_lock:
            _pairs.pop((inbox, backend), None)
        raise TensorTransportError(
            f"tensors of {producer} cannot be fetched: the producer died or stopped "
            f"answering ({type(exc).__name__}: {exc})") from exc
