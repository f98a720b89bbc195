"""Wire and storage layouts of a Serialized value.

Flat (object store): `ZMS1`, a little-endian u32 meta length, msgpack meta `[name, header,
[buffer lengths]]`, then each buffer at the next 64-byte-aligned offset (gaps zeroed). The
meta does not hold offsets, so they follow from it alone. Unpacking returns slices of the
source, so arrays rebuilt from them view the store's memory.

Frames (zmq multipart): a msgpack frame `[name, header, buffer count]`, then one frame per
buffer, sent as is.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import msgspec

from zmesh.errors import SerializationError
from zmesh.serializers.base import Buffer, Serialized

MAGIC = b"ZMS1"
ALIGN = 64
_PREFIX = struct.Struct("<4sI")


class _Meta(msgspec.Struct, array_like=True, frozen=True):
    name: str
    header: bytes
    lengths: list[int]


class _FramesHead(msgspec.Struct, array_like=True, frozen=True):
    name: str
    header: bytes
    buffer_count: int


_encoder = msgspec.msgpack.Encoder()
_meta_decoder = msgspec.msgpack.Decoder(_Meta)
_frames_decoder = msgspec.msgpack.Decoder(_FramesHead)


def _align(offset: int) -> int:
    return (offset + ALIGN - 1) & ~(ALIGN - 1)


def _views(s: Serialized) -> list[memoryview]:
    views = []
    for buffer in s.buffers:
        view = memoryview(buffer)
        views.append(view if view.ndim == 1 and view.format == "B" else view.cast("B"))
    return views


def _offsets(meta_len: int, lengths: Sequence[int]) -> tuple[list[int], int]:
    """Each buffer's offset, and the total size."""
    offsets = []
    end = _PREFIX.size + meta_len
    for length in lengths:
        start = _align(end)
        offsets.append(start)
        end = start + length
    return offsets, end


def _meta(s: Serialized, views: Sequence[memoryview]) -> bytes:
    return _encoder.encode(_Meta(s.name, bytes(s.header), [v.nbytes for v in views]))


def packed_size(s: Serialized) -> int:
    """Bytes `pack_into` writes for `s`."""
    views = _views(s)
    meta = _meta(s, views)
    return _offsets(len(meta), [v.nbytes for v in views])[1]


def pack_into(s: Serialized, dest: memoryview) -> None:
    """Write `s` into the start of `dest` (one memcpy per buffer); `dest` must be writable
    and at least `packed_size(s)` bytes. Buffers land 64-byte aligned relative to `dest`."""
    views = _views(s)
    meta = _meta(s, views)
    offsets, total = _offsets(len(meta), [v.nbytes for v in views])
    out = memoryview(dest).cast("B") if memoryview(dest).format != "B" else memoryview(dest)
    if out.readonly:
        raise ValueError("pack_into() needs a writable destination, got a read-only buffer")
    if out.nbytes < total:
        raise ValueError(f"pack_into() needs {total} bytes, destination has {out.nbytes}")
    end = _PREFIX.size + len(meta)
    _PREFIX.pack_into(out, 0, MAGIC, len(meta))
    out[_PREFIX.size : end] = meta
    for view, start in zip(views, offsets):
        out[end:start] = bytes(start - end)
        end = start + view.nbytes
        out[start:end] = view


def unpack_from(src: memoryview) -> Serialized:
    """Read a value written by `pack_into`; its buffers are slices of `src` (no copy)."""
    view = memoryview(src)
    if view.ndim != 1 or view.format != "B":
        view = view.cast("B")
    if view.nbytes < _PREFIX.size:
        raise SerializationError(f"packed value is {view.nbytes} bytes, too short for a header")
    magic, meta_len = _PREFIX.unpack_from(view, 0)
    if magic != MAGIC:
        raise SerializationError(f"packed value starts with {magic!r}, not {MAGIC!r}")
    meta_end = _PREFIX.size + meta_len
    if meta_end > view.nbytes:
        raise SerializationError(
            f"packed value says its meta is {meta_len} bytes, only {view.nbytes} in total"
        )
    try:
        meta = _meta_decoder.decode(view[_PREFIX.size : meta_end])
    except (msgspec.DecodeError, ValueError) as exc:
        raise SerializationError(f"packed value has a bad meta: {exc}") from None
    if any(length < 0 for length in meta.lengths):
        raise SerializationError(f"packed value has negative buffer lengths {meta.lengths}")
    offsets, total = _offsets(meta_len, meta.lengths)
    if total > view.nbytes:
        raise SerializationError(
            f"packed {meta.name!r} value needs {total} bytes, only {view.nbytes} present"
        )
    buffers: list[Buffer] = [view[o : o + n] for o, n in zip(offsets, meta.lengths)]
    return Serialized(meta.name, meta.header, buffers)


def to_frames(s: Serialized) -> list[Buffer]:
    """zmq multipart frames: a small msgpack head, then the buffers themselves (no copy)."""
    head = _encoder.encode(_FramesHead(s.name, bytes(s.header), len(s.buffers)))
    return [head, *s.buffers]


def from_frames(frames: Sequence[Buffer]) -> Serialized:
    """Parse frames from `to_frames` (bytes, memoryviews or zmq.Frame objects); the buffers
    are memoryviews of the received frames (no copy)."""
    if not frames:
        raise SerializationError("no frames: expected a serializer head frame")
    try:
        head = _frames_decoder.decode(frames[0])
    except (msgspec.DecodeError, ValueError, TypeError) as exc:
        raise SerializationError(f"bad serializer head frame: {exc}") from None
    if head.buffer_count != len(frames) - 1:
        raise SerializationError(
            f"head frame of a {head.name!r} value announces {head.buffer_count} buffers, "
            f"got {len(frames) - 1} frames after it"
        )
    return Serialized(head.name, head.header, [memoryview(f) for f in frames[1:]])
