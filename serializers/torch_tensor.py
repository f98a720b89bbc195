"""The "torch" serializer: a CPU tensor as its raw memory plus dtype, shape and strides.

torch is imported only when a tensor is actually seen (or one must be rebuilt), so zmesh
works without it. Dense tensors (any axis permutation) travel without a copy; others are
made contiguous first. Rebuilt tensors view the received buffer: torch has no read-only
tensors, so writing into one writes into that buffer. CUDA, sparse, quantized and
autograd-tracked non-leaf tensors are declined (pickle moves them through torch's own path).
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Sequence
from typing import Any

from zmesh.errors import SerializationError
from zmesh.serializers.base import Buffer, Serializer
from zmesh.serializers.numpy_array import (
    ArrayHeader,
    decode_header,
    dense_axis_order,
    encode_header,
)

# Wire names of the dtypes a tensor may carry as raw bytes (attribute names on `torch`).
_DTYPE_NAMES = (
    "bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64",
    "float16", "bfloat16", "float32", "float64", "complex32", "complex64", "complex128",
    "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
)  # fmt: skip


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise SerializationError(
            "cannot deserialize torch.Tensor with serializer 'torch': torch is not installed "
            "in this process"
        ) from None
    return torch


def _dtype_names(torch: Any) -> dict[Any, str]:
    return {getattr(torch, n): n for n in _DTYPE_NAMES if hasattr(torch, n)}


def _is_plain_tensor_type(tp: type) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and (tp is torch.Tensor or tp is torch.nn.Parameter)


def tensor_supported(tensor: Any) -> bool:
    """Whether `tensor` can travel as raw bytes: a dense-layout CPU tensor we can rebuild."""
    torch = sys.modules["torch"]
    return bool(
        tensor.device.type == "cpu"
        and tensor.layout is torch.strided
        and not tensor.is_quantized
        and tensor.dtype in _dtype_names(torch)
        and (tensor.is_leaf or not tensor.requires_grad)
    )


def tensor_to_parts(tensor: Any) -> tuple[bytes, memoryview]:
    """Header and one byte buffer viewing the tensor's memory (copied only if not dense)."""
    torch = sys.modules["torch"]
    names = _dtype_names(torch)
    t = tensor.detach()
    if t.is_conj():
        t = t.resolve_conj()
    if t.is_neg():
        t = t.resolve_neg()
    shape, strides = list(t.shape), list(t.stride())
    if t.numel() == 0:
        flat = t.new_empty((0,))
        strides = [0] * len(shape)
    elif dense_axis_order(shape, strides) is not None:
        flat = torch.as_strided(t, (t.numel(),), (1,), t.storage_offset())
    else:
        t = t.contiguous()
        strides = list(t.stride())
        flat = t.reshape(-1)
    raw = flat.view(torch.uint8) if flat.dtype is not torch.uint8 else flat
    is_parameter = isinstance(tensor, torch.nn.Parameter)
    header = ArrayHeader(names[t.dtype], shape, strides, bool(tensor.requires_grad), is_parameter)
    return encode_header(header), memoryview(raw.numpy())


def tensor_from_parts(data: bytes, buffer: memoryview) -> Any:
    """Rebuild a CPU tensor (or nn.Parameter, as sent) that views `buffer`."""
    torch = _torch()
    header = decode_header(data, "torch.Tensor", "torch")
    if header.dtype not in _DTYPE_NAMES or not hasattr(torch, header.dtype):
        raise SerializationError(
            f"cannot deserialize torch.Tensor with serializer 'torch': unknown dtype "
            f"{header.dtype!r}"
        )
    dtype = getattr(torch, header.dtype)
    itemsize = dtype.itemsize
    if buffer.nbytes % itemsize:
        raise SerializationError(
            f"cannot deserialize torch.Tensor with serializer 'torch': {buffer.nbytes} bytes "
            f"is not a whole number of {header.dtype} elements"
        )
    numel = 1
    for n in header.shape:
        numel *= n
    extent = 0 if numel == 0 else 1 + sum((n - 1) * s for n, s in zip(header.shape, header.strides))
    if any(s < 0 for s in header.strides) or extent * itemsize > buffer.nbytes:
        raise SerializationError(
            f"cannot deserialize torch.Tensor with serializer 'torch': shape {header.shape} "
            f"and strides {header.strides} reach past the {buffer.nbytes}-byte buffer"
        )
    import numpy

    with warnings.catch_warnings():
        # torch warns once that it cannot mark a tensor read-only; the docstring says so.
        warnings.simplefilter("ignore", UserWarning)
        raw = torch.from_numpy(numpy.frombuffer(buffer, dtype=numpy.uint8))
    flat = raw.view(dtype) if dtype is not torch.uint8 else raw
    tensor = torch.as_strided(flat, header.shape, header.strides) if numel else flat.reshape(header.shape)
    if header.parameter:
        return torch.nn.Parameter(tensor, requires_grad=header.requires_grad)
    return tensor.requires_grad_() if header.requires_grad else tensor


class TorchSerializer(Serializer):
    """A bare CPU `torch.Tensor` (or `nn.Parameter`), any raw dtype including bfloat16."""

    name = "torch"
    trusted_only = False

    def handles_type(self, tp: type) -> bool:
        return _is_plain_tensor_type(tp)

    def can_serialize(self, value: object) -> bool:
        return _is_plain_tensor_type(type(value)) and tensor_supported(value)

    def serialize(self, value: object) -> tuple[bytes, list[Buffer]]:
        if not self.can_serialize(value):
            raise SerializationError(
                f"cannot serialize {_describe(value)} with serializer 'torch': it takes dense "
                f"CPU tensors of raw dtypes (use 'pickle5')"
            )
        header, buffer = tensor_to_parts(value)
        return header, [buffer]

    def deserialize(self, header: bytes, buffers: Sequence[memoryview]) -> object:
        if len(buffers) != 1:
            raise SerializationError(
                f"cannot deserialize torch.Tensor with serializer 'torch': expected 1 buffer, "
                f"got {len(buffers)}"
            )
        return tensor_from_parts(header, buffers[0])


def _describe(value: object) -> str:
    if _is_plain_tensor_type(type(value)):
        t: Any = value
        return f"a {t.layout} {t.dtype} tensor on {t.device}"
    return type(value).__qualname__
