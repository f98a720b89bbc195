"""zmesh.serializers: values to `(header, buffers)` and back, zero-copy for arrays and tensors.

`serialize(value)` picks a serializer per value (msgspec for plain data, numpy, torch, pickle5
for the rest); `deserialize(s, trusted=...)` refuses pickle from unauthenticated peers.
`register_serializer(cls, serializer=..., deserializer=...)` adds user types (Ray's API);
`register(Serializer)` adds whole serializers by name. `layout` packs values for the object
store and for zmq multipart messages.
"""

from __future__ import annotations

if __name__ != "zmesh.serializers":  # pragma: no cover - a second copy means a second registry
    raise ImportError(
        f"import zmesh.serializers, not {__name__!r}: the serializers/ folder installs as "
        f"zmesh.serializers, and a second copy would have its own registry"
    )

from collections.abc import Callable
from typing import Any, TypeVar

from zmesh.serializers.base import Buffer, Serialized, Serializer
from zmesh.serializers.custom_types import CustomTypeSerializer
from zmesh.serializers.layout import from_frames, pack_into, packed_size, to_frames, unpack_from
from zmesh.serializers.msgspec_plain import MsgspecSerializer
from zmesh.serializers.numpy_array import NumpySerializer
from zmesh.serializers.pickle5 import Pickle5Serializer
from zmesh.serializers.registry import SerializedParts, SerializerRegistry
from zmesh.serializers.remote_exceptions import remote_traceback
from zmesh.serializers.torch_tensor import TorchSerializer

T = TypeVar("T")

#: The process-wide registry behind the functions below.
default_registry = SerializerRegistry()


def serialize(value: object, *, serializer: str | None = None) -> Serialized:
    """Encode `value`, with the serializer named, else the default, else the one picked for it."""
    return default_registry.serialize(value, serializer=serializer)


def deserialize(serialized: Serialized | SerializedParts, *, trusted: bool) -> object:
    """Rebuild a value; `trusted=False` refuses trusted-only serializers (pickle5)."""
    return default_registry.deserialize(serialized, trusted=trusted)


def register(serializer: Serializer, *, replace: bool = False) -> None:
    """Add a Serializer by its name (picked automatically for the types it `handles_type`)."""
    default_registry.register(serializer, replace=replace)


def register_serializer(
    cls: type[T], *, serializer: Callable[[T], object], deserializer: Callable[[Any], T]
) -> None:
    """Ray's `register_serializer`: `serializer(obj)` returns something serializable, and
    `deserializer(that)` rebuilds the object. Register it in every process that receives it."""
    default_registry.register_serializer(cls, serializer=serializer, deserializer=deserializer)


def deregister_serializer(cls: type) -> None:
    """Undo `register_serializer(cls, ...)`."""
    default_registry.deregister_serializer(cls)


def get_serializer(name: str) -> Serializer:
    """The serializer registered as `name` (a wrong name suggests the closest one)."""
    return default_registry.get(name)


def serializer_names() -> list[str]:
    """The registered serializer names."""
    return default_registry.names()


def set_default_serializer(name: str | None) -> None:
    """Use serializer `name` for every value not given one per call; None picks per value."""
    default_registry.set_default(name)


__all__ = [
    "Buffer",
    "CustomTypeSerializer",
    "MsgspecSerializer",
    "NumpySerializer",
    "Pickle5Serializer",
    "Serialized",
    "SerializedParts",
    "Serializer",
    "SerializerRegistry",
    "TorchSerializer",
    "default_registry",
    "deregister_serializer",
    "deserialize",
    "from_frames",
    "get_serializer",
    "pack_into",
    "packed_size",
    "register",
    "register_serializer",
    "remote_traceback",
    "serialize",
    "serializer_names",
    "set_default_serializer",
    "to_frames",
    "unpack_from",
]
