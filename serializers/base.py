"""The serializer interface: a value becomes a header plus out-of-band buffers, and back.

Buffers are bytes-like objects that the transport sends as separate frames (or the object
store copies once), so large arrays never pass through an intermediate bytes object.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import NamedTuple, TypeAlias, Union

#: Anything exposing the buffer protocol as contiguous bytes; serializers hand these out
#: zero-copy (memoryviews into arrays and tensors) and receive memoryviews back.
Buffer: TypeAlias = Union[bytes, bytearray, memoryview]


class Serialized(NamedTuple):
    """What travels: the serializer's name, its header, and its out-of-band buffers.

    Being a tuple, `(name, header, buffers)` parts are accepted wherever a Serialized is.
    """

    name: str
    header: bytes
    buffers: list[Buffer]

    @property
    def nbytes(self) -> int:
        """Total payload size (header plus buffers), e.g. to decide inline or object store."""
        return len(self.header) + sum(memoryview(b).nbytes for b in self.buffers)


class Serializer(abc.ABC):
    """Turns values into `(header, buffers)` and back; register instances by `name`.

    `serialize` may return memoryviews into the value (zero-copy): the caller must finish
    sending or copying them before the value is mutated. `deserialize` may return objects
    that view the given buffers (no copy), so the buffers must outlive the result. Both
    raise `zmesh.errors.SerializationError` naming the type and this serializer on failure.
    """

    #: Wire name, unique per registry ("msgspec", "pickle5", "numpy", "torch", ...).
    name: str
    #: True when loading can run code (pickle): accepted only from authenticated peers.
    trusted_only: bool = False

    @abc.abstractmethod
    def can_serialize(self, value: object) -> bool:
        """Whether `serialize(value)` would succeed and round-trip `value` exactly."""

    @abc.abstractmethod
    def serialize(self, value: object) -> tuple[bytes, list[Buffer]]:
        """Encode `value` into a header and zero or more buffers."""

    @abc.abstractmethod
    def deserialize(self, header: bytes, buffers: Sequence[memoryview]) -> object:
        """Rebuild the value from what `serialize` produced."""

    def handles_type(self, tp: type) -> bool:
        """Whether the registry should try this serializer first for values of exact type `tp`.

        The registry caches the answer per type, so this must depend on `tp` only. The
        default (False) makes a serializer reachable by name only.
        """
        return False

    def try_serialize(self, value: object) -> tuple[bytes, list[Buffer]] | None:
        """`serialize(value)`, or None when this serializer declines it (registry fast path).

        Override when checking and encoding can share one pass over the value.
        """
        if not self.can_serialize(value):
            return None
        return self.serialize(value)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


def type_name(value_or_type: object) -> str:
    """A readable name for a value's type (or a type): `numpy.ndarray`, `Trainer`, `_thread.lock`."""
    tp = value_or_type if isinstance(value_or_type, type) else type(value_or_type)
    module = tp.__module__
    if module in ("builtins", "__main__") or not module:
        return tp.__qualname__
    return f"{module}.{tp.__qualname__}"
