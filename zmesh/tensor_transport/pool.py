"""Receive buffers that stay warm: host memory for received tensors, reused once the tensors
that lent it are gone.

A fresh multi-megabyte buffer costs a page fault per 4 KB page on first touch (the kernel
zeroes each page): receiving 256 MB into new memory takes about twice as long as into memory
touched before. So the consumer receives large host tensors into blocks it keeps: each
tensor handed out is a view of a block, and a weakref callback on that view gives the block back
only when no tensor (nor any view or storage of it) refers to the memory any more, so a
tensor the user holds is never overwritten. Free blocks are kept up to `cap_bytes` (the
environment's ZMESH_TENSOR_POOL_BYTES, default 1 GiB; 0 turns pooling off; the least
recently returned go first to make room) and matched by size rounded up to a page; `empty_cache()` hands them back to the system, as torch's CUDA
caching allocator does.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any

import numpy as np

POOL_MIN_BYTES = 1 << 20  # smaller tensors come warm from malloc's heap
PAGE = 4096
DEFAULT_CAP_BYTES = 1 << 30


def _numpy_dtypes() -> dict[Any, Any]:
    """torch dtype -> the numpy dtype of the same layout, for those numpy has."""
    import torch

    return {getattr(torch, name): np.dtype(name) for name in (
        "float16", "float32", "float64", "complex64", "complex128", "bool", "uint8", "int8",
        "int16", "int32", "int64", "uint16", "uint32", "uint64") if hasattr(torch, name)}


_NUMPY_DTYPES: dict[Any, Any] = {}


def _cap_from_env() -> int:
    raw = os.environ.get("ZMESH_TENSOR_POOL_BYTES", "")
    try:
        return max(0, int(raw)) if raw else DEFAULT_CAP_BYTES
    except ValueError:
        raise ValueError(f"ZMESH_TENSOR_POOL_BYTES must be a number of bytes, got {raw!r}") \
            from None


class RecvPool:
    """Warm host blocks for received tensors (thread-safe; blocks come back from finalizers,
    which run in whichever thread drops the last reference)."""

    def __init__(self, cap_bytes: int) -> None:
        self.cap_bytes = cap_bytes
        self._lock = threading.RLock()  # a finalizer may run inside our own allocation
        self._free: list[Any] = []  # free blocks, the least recently returned first
        self.free_bytes = 0
        self.reused = 0
        # a loan's watch (a weakref to its ndarray, kept here) -> (the watch, its block)
        self._loans: dict[int, tuple[weakref.ref[Any], Any]] = {}

    def empty(self, shape: list[int], dtype: Any) -> Any:
        """An uninitialized CPU tensor of `shape` and `dtype`, in a warm block when large."""
        import torch

        if not _NUMPY_DTYPES:
            _NUMPY_DTYPES.update(_numpy_dtypes())
        numel = 1
        for d in shape:
            numel *= d
        nbytes = numel * dtype.itemsize
        if nbytes < POOL_MIN_BYTES or self.cap_bytes <= 0:
            return torch.empty(shape, dtype=dtype)
        size = -(-nbytes // PAGE) * PAGE
        block = self._take(size)
        if block is None:
            block = np.empty(size, dtype=np.uint8)
        # a new ndarray per loan, over the block; the tensor's storage holds it, so it dies
        # (and the block comes back) only when no tensor or view uses the memory any more
        as_numpy = _NUMPY_DTYPES.get(dtype)
        if as_numpy is not None:
            loan = np.ndarray(shape, as_numpy, block)
            tensor = torch.from_numpy(loan)
        else:  # a dtype numpy lacks (bfloat16, float8 ...): bytes, viewed as it
            loan = block[:nbytes]
            tensor = torch.from_numpy(loan).view(dtype).view(shape)
        watch = weakref.ref(loan, self._returned)
        with self._lock:
            self._loans[id(watch)] = (watch, block)
        return tensor

    def _returned(self, watch: weakref.ref[Any]) -> None:
        with self._lock:
            _watch, block = self._loans.pop(id(watch), (None, None))
        if block is not None:
            self._give_back(block)

    def _take(self, size: int) -> Any:
        with self._lock:
            for i in range(len(self._free) - 1, -1, -1):  # the most recently returned first
                if self._free[i].nbytes == size:
                    block = self._free.pop(i)
                    self.free_bytes -= size
                    self.reused += 1
                    return block
            return None

    def _give_back(self, block: Any) -> None:
        size = int(block.nbytes)
        with self._lock:
            if size > self.cap_bytes:
                return  # over the cap: the block goes back to the system with its last ref
            # make room by letting the least recently returned blocks go: a run of 1 GB
            # transfers after a 256 MB one must not fault in fresh memory every time
            while self.free_bytes + size > self.cap_bytes:
                self.free_bytes -= int(self._free.pop(0).nbytes)
            self._free.append(block)
            self.free_bytes += size

    def clear(self) -> int:
        """Hand every free block back to the system; returns how many bytes that was."""
        with self._lock:
            freed = self.free_bytes
            self._free.clear()
            self.free_bytes = 0
            return freed


POOL = RecvPool(_cap_from_env())


def empty_cache() -> int:
    """Release the warm receive blocks no tensor uses now (bytes released)."""
    import sys

    consumer = sys.modules.get("zmesh.tensor_transport.consumer")
    if consumer is not None:  # the last transfers' works may still hold blocks
        consumer.drop_idle_spent()
    return POOL.clear()
