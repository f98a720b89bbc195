"""The tensor transport: actor methods whose returned tensors stay in the producer and move
producer -> consumer over torch.distributed, never through pickling or the object store.

    @zmesh.remote
    class Trainer:
        @zmesh.method(tensor_transport="gloo")      # "nccl" for CUDA tensors
        def weights(self):
            return {"w": self.w}

    ref = trainer.weights.remote()       # a ref to a small descriptor
    rollout.load.remote(ref)              # rollout receives the tensors from trainer directly
    zmesh.get(ref)                        # the driver gets a host copy

Any holder may pass the ref on; the producer frees the tensors when the last ref is gone;
a consumer whose producer died gets TensorTransportError. Works for threaded and async
actors (the producer serves transfers on its own threads). Large host tensors are received
into warm blocks, reused once the tensors are gone (`empty_cache()` releases idle ones).
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from zmesh.tensor_transport.pool import empty_cache
    from zmesh.tensor_transport.types import TensorTransportError
    from zmesh.tensor_transport.value import Transported, keep, kept_count

# Loaded on first use (PEP 562): `pool` imports numpy (~50 ms), and every actor caller imports
# `tensor_transport.push`, whose package this is, so an eager import here put numpy into the
# fork server's pre-imports and made the first task after `init()` wait for it.
_LAZY = {"empty_cache": "pool", "TensorTransportError": "types", "Transported": "value",
         "keep": "value", "kept_count": "value"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


__all__ = ["TensorTransportError", "Transported", "empty_cache", "keep", "kept_count"]
