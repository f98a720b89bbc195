"""Turning Python values into `Value`s and back: inline when small, in the store when large.

Small values travel packed inside the message. Large ones are written once into the node's
memory-mapped store and read back in place: numpy arrays and tensors come back as read-only
views of the mapping, with no copy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import zmesh.serializers as registry
from zmesh.errors import SerializationError, ZmeshError
from zmesh.protocol.messages.runtime import StoreLoc, Value
from zmesh.runtime import context
from zmesh.serializers import Serialized, layout
from zmesh.task_error import TaskError

INLINE_LIMIT = 100 * 1024
_SURELY_INLINE = INLINE_LIMIT - 1024  # a header this short packs within INLINE_LIMIT
_ATOMS = frozenset({int, float, bool, str, bytes})

# (object_id, size) -> (location, writable memoryview); the caller seals after writing.
Allocator = Callable[[bytes, int], tuple[StoreLoc, memoryview]]
Sealer = Callable[[bytes], None]
# (location) -> read-only memoryview that stays valid while any view of it lives
Reader = Callable[[StoreLoc], memoryview]



_COMPACT = 1  # first byte of an inline value with no buffers: 1, name, 0, header


def pack(s: Any) -> bytes:
    """A serialized value packed into one bytes-like block (for inline values).

    A value without buffers (most small ones) takes a compact form, which costs a tenth of
    the store layout; the store layout starts with its magic, so the two never collide.
    """
    if not s.buffers:
        return b"\x01" + s.name.encode() + b"\x00" + s.header  # type: ignore[no-any-return]
    buf = bytearray(layout.packed_size(s))
    layout.pack_into(s, memoryview(buf))
    return buf  # type: ignore[return-value]  # bytearray encodes exactly like bytes


def unpack(buf: Any) -> Any:
    """The Serialized packed by `pack` (or written to the store with the layout)."""
    if buf[0] == _COMPACT:
        data = bytes(buf)
        cut = data.index(b"\x00", 1)
        return Serialized(data[1:cut].decode(), data[cut + 1:], [])
    return layout.unpack_from(memoryview(buf))


NONE_VALUE = Value(data=pack(registry.serialize(None)))
_NONE_DATA = NONE_VALUE.data


def serialize(obj: Any, serializer: str | None = None) -> tuple[Any, list[Any]]:
    """Serialize a value, collecting the ObjectRefs inside it."""
    with context.RefCollector() as refs:
        s = registry.serialize(obj, serializer=serializer)
    return s, refs.refs


def encode(
    obj: Any,
    object_id: bytes,
    *,
    allocate: Allocator | None,
    seal: Sealer | None,
    serializer: str | None = None,
) -> tuple[Value, list[Any]]:
    """A Value for `obj` and the refs nested in it; large values go to the store if we can."""
    if serializer is None:
        if obj is None:
            return NONE_VALUE, []
        if type(obj) in _ATOMS:  # (most results) no ref can be inside: nothing to collect
            s = registry.serialize(obj)
            refs: list[Any] = []
        else:
            s, refs = serialize(obj)
    else:
        s, refs = serialize(obj, serializer)
    if not s.buffers and len(s.header) <= _SURELY_INLINE:  # its size needs no layout
        return Value(data=pack(s)), refs
    size = layout.packed_size(s)
    if size <= INLINE_LIMIT or allocate is None or seal is None:
        return Value(data=pack(s)), refs
    loc, dest = allocate(object_id, size)
    layout.pack_into(s, dest)
    del dest
    seal(object_id)
    return Value(loc=loc), refs


def encode_error(exc: BaseException, refs: list[Any] | None = None) -> Value:
    """An error Value; an exception that cannot be pickled keeps its text and traceback.
    With `refs`, the ObjectRefs inside go there (the caller hands them over, as a return
    value's); without, each is pinned for good as an out-of-band ref."""
    try:
        if refs is None:
            data = pack(registry.serialize(exc, serializer="pickle5"))
        else:
            s, nested = serialize(exc, serializer="pickle5")
            data = pack(s)
            refs.extend(nested)
    except Exception:
        if isinstance(exc, TaskError):
            fallback: BaseException = TaskError(exc.function_name, exc.traceback_str, None, exc.pid)
        else:
            fallback = ZmeshError(f"{type(exc).__name__}: {exc}")
        data = pack(registry.serialize(fallback, serializer="pickle5"))
    return Value(data=data, is_error=True)


def decode(value: Value, read: Reader | None) -> Any:
    """The Python value of a Value (an error Value decodes to its exception object)."""
    if value.data == _NONE_DATA and not value.is_error:  # the commonest answer: no unpacking
        return None
    if value.loc is None:
        buf: memoryview = memoryview(value.data)
    else:
        if read is None:
            raise SerializationError("a stored object cannot be read in this process")
        buf = read(value.loc)
    try:
        s = unpack(buf)
        return registry.deserialize(s, trusted=True)
    except SerializationError:
        raise
    except Exception as exc:
        raise SerializationError(f"cannot decode a value: {exc}") from exc


def raise_if_error(value: Value, obj: Any) -> Any:
    """Re-raise the exception an error Value holds, as an instance of the user's class."""
    if not value.is_error:
        return obj
    if isinstance(obj, TaskError):
        raise obj.as_instanceof_cause()
    if isinstance(obj, BaseException):
        raise obj
    raise ZmeshError(f"task failed: {obj!r}")
