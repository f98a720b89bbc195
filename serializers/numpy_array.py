"""The "numpy" serializer: a bare ndarray as its raw memory plus dtype, shape and strides.

Arrays whose elements fill their memory span without gaps (C order, Fortran order, any axis
permutation) travel without a copy, strides and all; others (slices with steps, negative
strides) are copied to C order first. Object and structured dtypes are declined (pickle
takes them). numpy is imported only when an array is actually seen.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import msgspec

from zmesh.errors import SerializationError
from zmesh.serializers.base import Buffer, Serializer

# Fixed-size element kinds whose bytes are the whole value: no pointers, no fields.
_RAW_KINDS = frozenset("biufcmMSUV")


class ArrayHeader(msgspec.Struct, array_like=True, frozen=True):
    """dtype (numpy `dtype.str` or a torch dtype name), shape, and strides (bytes for numpy,
    elements for torch) of an array stored in one buffer that starts at its lowest element."""

    dtype: str
    shape: list[int]
    strides: list[int]
    requires_grad: bool = False
    parameter: bool = False  # torch: rebuild as nn.Parameter


_header_encoder = msgspec.msgpack.Encoder()
_header_decoder = msgspec.msgpack.Decoder(ArrayHeader)


def encode_header(header: ArrayHeader) -> bytes:
    return _header_encoder.encode(header)


def decode_header(data: bytes, what: str, serializer: str) -> ArrayHeader:
    """Decode and sanity-check an array header; bad input raises SerializationError."""
    try:
        header = _header_decoder.decode(data)
    except (msgspec.DecodeError, ValueError) as exc:
        raise SerializationError(
            f"cannot deserialize {what} with serializer {serializer!r}: bad header ({exc})"
        ) from None
    if len(header.shape) != len(header.strides) or any(n < 0 for n in header.shape):
        raise SerializationError(
            f"cannot deserialize {what} with serializer {serializer!r}: shape {header.shape} "
            f"and strides {header.strides} do not describe an array"
        )
    return header


def dense_axis_order(shape: Sequence[int], strides: Sequence[int]) -> list[int] | None:
    """Axes from outermost to innermost if the elements tile their span with no gaps or
    overlaps (strides in elements), else None. Axes of length 1 may have any stride."""
    axes = sorted((i for i in range(len(shape)) if shape[i] != 1), key=lambda i: -strides[i])
    if any(shape[i] == 0 for i in axes):
        return list(range(len(shape)))
    expected = 1
    for i in reversed(axes):
        if strides[i] != expected:
            return None
        expected *= shape[i]
    ones = [i for i in range(len(shape)) if shape[i] == 1]
    return axes + ones


def _numpy() -> Any:
    import numpy

    return numpy


def _supported(array: Any) -> bool:
    dtype = array.dtype
    return bool(dtype.kind in _RAW_KINDS and dtype.fields is None and dtype.itemsize > 0)


class NumpySerializer(Serializer):
    """A bare `numpy.ndarray` of a fixed-size, non-structured dtype; zero-copy both ways."""

    name = "numpy"
    trusted_only = False

    def handles_type(self, tp: type) -> bool:
        np = sys.modules.get("numpy")
        return np is not None and tp is np.ndarray

    def can_serialize(self, value: object) -> bool:
        np = sys.modules.get("numpy")
        return np is not None and type(value) is np.ndarray and _supported(value)

    def serialize(self, value: object) -> tuple[bytes, list[Buffer]]:
        if not self.can_serialize(value):
            dtype = getattr(value, "dtype", None)
            detail = f"dtype {dtype}" if dtype is not None else type(value).__name__
            raise SerializationError(
                f"cannot serialize {detail} with serializer 'numpy': it takes bare ndarrays of "
                f"fixed-size, non-structured dtypes (use 'pickle5')"
            )
        array: Any = value
        itemsize = array.dtype.itemsize
        if array.size == 0 or array.flags.c_contiguous:
            flat = array.reshape(-1)
        else:
            elem_strides = [s // itemsize if s % itemsize == 0 else -1 for s in array.strides]
            order = dense_axis_order(array.shape, elem_strides)
            permuted = array.transpose(order) if order is not None else None
            if permuted is not None and permuted.flags.c_contiguous:
                flat = permuted.reshape(-1)
            else:
                array = _numpy().ascontiguousarray(array)
                flat = array.reshape(-1)
        header = ArrayHeader(array.dtype.str, list(array.shape), list(array.strides))
        return encode_header(header), [memoryview(flat.view("u1"))]

    def deserialize(self, header: bytes, buffers: Sequence[memoryview]) -> object:
        return array_from_buffer(header, buffers)


def array_from_buffer(data: bytes, buffers: Sequence[memoryview]) -> Any:
    """Rebuild an ndarray that views `buffers[0]` (read-only if the buffer is)."""
    np = _numpy()
    header = decode_header(data, "numpy.ndarray", "numpy")
    if len(buffers) != 1:
        raise SerializationError(
            f"cannot deserialize numpy.ndarray with serializer 'numpy': expected 1 buffer, "
            f"got {len(buffers)}"
        )
    try:
        dtype = np.dtype(header.dtype)
    except (TypeError, ValueError) as exc:
        raise SerializationError(
            f"cannot deserialize numpy.ndarray with serializer 'numpy': bad dtype "
            f"{header.dtype!r} ({exc})"
        ) from None
    if dtype.kind not in _RAW_KINDS or dtype.hasobject or dtype.itemsize == 0:
        # An object dtype read from raw bytes would turn attacker bytes into pointers.
        raise SerializationError(
            f"cannot deserialize numpy.ndarray with serializer 'numpy': dtype {dtype} is not "
            f"a raw fixed-size dtype"
        )
    buffer = buffers[0]
    if any(n == 0 for n in header.shape):
        return np.ndarray(header.shape, dtype=dtype, buffer=buffer[:0], strides=header.strides)
    try:
        return np.ndarray(header.shape, dtype=dtype, buffer=buffer, strides=header.strides)
    except (TypeError, ValueError) as exc:
        raise SerializationError(
            f"cannot deserialize numpy.ndarray with serializer 'numpy': {exc} (shape "
            f"{header.shape}, strides {header.strides}, dtype {dtype}, {buffer.nbytes} bytes)"
        ) from None
