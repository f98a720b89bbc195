"""The "custom" serializer: user types registered with `register_serializer` (Ray's signature).

A registered type is turned into something serializable by the user's function, and that is
serialized by whatever serializer the registry picks for it (so a type that reduces to plain
data needs no pickle). The receiving process must have registered the type too; nested inside
a pickled structure, the pickle5 reducer carries the deserializer along instead.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from zmesh.errors import SerializationError
from zmesh.serializers.base import Buffer, Serialized, Serializer, type_name

if TYPE_CHECKING:
    from zmesh.serializers.registry import SerializerRegistry


class _CustomHeader(msgspec.Struct, array_like=True, frozen=True):
    type_key: str
    inner_name: str
    inner_header: bytes
    buffer_count: int


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(_CustomHeader)


def type_key(cls: type) -> str:
    """The name a registered type travels under: `module:qualname`."""
    return f"{cls.__module__}:{cls.__qualname__}"


class CustomTypeSerializer(Serializer):
    """Serializes exact instances of types registered with `register_serializer`."""

    name = "custom"
    trusted_only = False  # the inner serializer's trust is checked when it is decoded

    def __init__(self, registry: SerializerRegistry) -> None:
        self._registry = registry
        self.reducers: dict[type, tuple[Callable[[Any], object], Callable[[Any], Any]]] = {}
        self._by_key: dict[str, type] = {}

    def add(self, cls: type, to_serializable: Callable[[Any], object],
            from_serializable: Callable[[Any], Any]) -> None:  # fmt: skip
        self.reducers[cls] = (to_serializable, from_serializable)
        self._by_key[type_key(cls)] = cls

    def remove(self, cls: type) -> bool:
        self._by_key.pop(type_key(cls), None)
        return self.reducers.pop(cls, None) is not None

    def handles_type(self, tp: type) -> bool:
        return tp in self.reducers

    def can_serialize(self, value: object) -> bool:
        return type(value) in self.reducers

    def serialize(self, value: object) -> tuple[bytes, list[Buffer]]:
        reducer = self.reducers.get(type(value))
        if reducer is None:
            raise SerializationError(
                f"cannot serialize {type_name(value)} with serializer 'custom': the type is not "
                f"registered (use register_serializer)"
            )
        try:
            reduced = reducer[0](value)
        except Exception as exc:
            raise SerializationError(
                f"cannot serialize {type_name(value)}: its registered serializer raised "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        if type(reduced) is type(value):
            raise SerializationError(
                f"cannot serialize {type_name(value)}: its registered serializer returned another "
                f"{type_name(value)}; it must return something else that is serializable"
            )
        inner = self._registry.serialize(reduced)
        header = _CustomHeader(type_key(type(value)), inner.name, inner.header, len(inner.buffers))
        return _encoder.encode(header), list(inner.buffers)

    def deserialize(self, header: bytes, buffers: Sequence[memoryview]) -> object:
        return self.deserialize_with_trust(header, buffers, trusted=False)

    def deserialize_with_trust(
        self, header: bytes, buffers: Sequence[memoryview], trusted: bool
    ) -> object:
        """Decode, passing the caller's trust on to the serializer of the reduced value."""
        try:
            head = _decoder.decode(header)
        except (msgspec.DecodeError, ValueError) as exc:
            raise SerializationError(
                f"cannot deserialize a registered type with serializer 'custom': bad header ({exc})"
            ) from None
        cls = self._by_key.get(head.type_key)
        if cls is None:
            raise SerializationError(
                f"cannot deserialize {head.type_key} with serializer 'custom': no serializer is "
                f"registered for it in this process; call register_serializer for it here too"
            )
        if head.buffer_count != len(buffers):
            raise SerializationError(
                f"cannot deserialize {head.type_key} with serializer 'custom': header says "
                f"{head.buffer_count} buffers, got {len(buffers)}"
            )
        inner = Serialized(head.inner_name, head.inner_header, list(buffers))
        reduced = self._registry.deserialize(inner, trusted=trusted)
        try:
            return self.reducers[cls][1](reduced)
        except Exception as exc:
            raise SerializationError(
                f"cannot deserialize {type_name(cls)} with serializer 'custom': its registered "
                f"deserializer raised {type(exc).__name__}: {exc}"
            ) from exc
