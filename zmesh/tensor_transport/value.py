"""What a `tensor_transport` method's ref holds: a small descriptor, never the tensors.

The producer keeps the tensors (`KEPT`) and returns a `Transported` value: the result with
each tensor replaced by a placeholder, the tensors' shapes and dtypes, the producer's address
and an anchor ref the producer owns. Pickled, it is a few hundred bytes in the object store;
unpickled anywhere (an actor that takes the ref as an argument, the driver's `get`), it
fetches the tensors from the producer over torch.distributed and rebuilds the result. The
anchor travels inside every stored copy, so zmesh's reference counting tells the producer
when the last ref is gone: then it drops the tensors. Unpickled, the anchor is only its id:
the outer ref being read keeps the tensors alive while they are fetched, and a live ref per
read would cost an incref, a decref and a message to the producer on every transfer.
"""

from __future__ import annotations

import uuid
from typing import Any

from zmesh.tensor_transport import producer
from zmesh.tensor_transport.types import BACKENDS


class _Slot:
    """Where the i-th tensor goes back in the rebuilt result."""

    def __init__(self, index: int) -> None:
        self.index = index

    def __reduce__(self) -> Any:
        return (_Slot, (self.index,))


def _split(value: Any, tensors: list[Any]) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        tensors.append(value.detach().contiguous())  # what send takes
        return _Slot(len(tensors) - 1)
    if isinstance(value, list | tuple):
        items = [_split(v, tensors) for v in value]
        return items if isinstance(value, list) else tuple(items)
    if isinstance(value, dict):
        return {k: _split(v, tensors) for k, v in value.items()}
    return value


def _join(skeleton: Any, tensors: list[Any]) -> Any:
    if isinstance(skeleton, _Slot):
        return tensors[skeleton.index]
    if isinstance(skeleton, list | tuple):
        items = [_join(v, tensors) for v in skeleton]
        return items if isinstance(skeleton, list) else tuple(items)
    if isinstance(skeleton, dict):
        return {k: _join(v, tensors) for k, v in skeleton.items()}
    return skeleton


class _Anchor:
    """The producer's anchor ref inside a descriptor: pickled as the ref (so the value that
    holds it is counted as holding the ref), unpickled as a bare (id, owner) pair."""

    __slots__ = ("ref",)

    def __init__(self, ref: Any) -> None:
        self.ref = ref

    def __reduce__(self) -> Any:
        _restore, args = self.ref.__reduce__()  # notes the ref as held by the value
        return (_anchor_id, args)


def _anchor_id(object_id: bytes, owner: str) -> tuple[bytes, str]:
    return (object_id, owner)


class Transported:
    """The value a tensor-transport method returns, as its ref carries it."""

    def __init__(self, state: dict[str, Any]) -> None:
        self.state = state

    def __reduce__(self) -> Any:
        return (_materialize, (self.state,))


def keep(result: Any, backend: str, producer_name: str) -> Transported:
    """Keep the tensors of `result` here and return the descriptor that stands for it."""
    if backend not in BACKENDS:
        raise ValueError(f"tensor_transport must be one of {BACKENDS}, got {backend!r}")
    from zmesh.runtime import context

    tensors: list[Any] = []
    skeleton = _split(result, tensors)
    key = uuid.uuid4().hex
    tag = producer.KEPT.keep(key, tensors)
    client = context.current_client()
    anchor = client.put(key)  # owned here: freed when the last copy of the descriptor is gone
    client.free_hooks[anchor.id] = lambda: producer.KEPT.drop(key)
    address = producer.KEPT.listen()
    state: dict[str, Any] = {
        "address": address, "token": producer.PROCESS_TOKEN,
        "backend": backend, "key": key, "anchor": _Anchor(anchor), "skeleton": skeleton,
        "metas": [(list(t.shape), str(t.dtype).removeprefix("torch.")) for t in tensors],
        "devices": [t.device.type for t in tensors], "producer": producer_name}
    if backend == "gloo" and 0 < len(tensors) <= producer.INLINE_SIZES and \
            all(t.device.type == "cpu" for t in tensors):
        # a caller that passes the ref to an actor asks for a push (gloo, host tensors)
        from zmesh.tensor_transport.push import marker

        state["push"] = marker(key, address, tag, tuple(t.nbytes for t in tensors))
    return Transported(state)


def _materialize(state: dict[str, Any]) -> Any:
    """Rebuild the result here: local tensors in the producer, fetched ones elsewhere."""
    from zmesh.tensor_transport.consumer import fetch

    if state["token"] == producer.PROCESS_TOKEN:
        tensors = producer.KEPT.get(state["key"])
        if tensors is not None:
            return _join(state["skeleton"], tensors)
    from zmesh.tensor_transport.push import was_pushed

    device = _device_here(state["backend"])
    tensors = fetch(state["address"], state["backend"], state["key"], state["metas"], device,
                    state["producer"], was_pushed(state.get("push", b"")))
    return _join(state["skeleton"], tensors)


def _device_here(backend: str) -> str:
    """Where received tensors go: the current CUDA device for nccl, host memory otherwise
    (the driver's `get` always lands on the host for gloo)."""
    if backend == "nccl":
        import torch

        if torch.cuda.is_available():
            return f"cuda:{torch.cuda.current_device()}"
    return "cpu"


def kept_count() -> int:
    """How many results this process keeps for tensor-transport refs (for tests and tools)."""
    return producer.KEPT.count()
