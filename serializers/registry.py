"""The serializer registry: picks a serializer per value, by name, and checks trust on load.

Picking is one dict lookup on the value's exact type (the answer is cached per type), then
that serializer either encodes the value or declines it (e.g. a dict holding an object) and
pickle5 takes it. A module-level default registry backs the `zmesh.serializers` functions.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from zmesh.errors import SerializationError, UntrustedSerializerError
from zmesh.serializers.base import Buffer, Serialized, Serializer, type_name
from zmesh.serializers.custom_types import CustomTypeSerializer
from zmesh.serializers.msgspec_plain import MsgspecSerializer
from zmesh.serializers.numpy_array import NumpySerializer
from zmesh.serializers.pickle5 import Pickle5Serializer
from zmesh.serializers.torch_tensor import TorchSerializer

T = TypeVar("T")

#: What `deserialize` accepts: a Serialized, or any `(name, header, buffers)` triple.
SerializedParts = tuple[str, bytes, Sequence[Buffer]]


class SerializerRegistry:
    """Serializers by name, a per-type pick for values, and user-registered types."""

    def __init__(self) -> None:
        self._by_name: dict[str, Serializer] = {}
        self._auto: list[Serializer] = []  # asked in order by `handles_type`, users first
        self._by_type: dict[type, Serializer] = {}  # the answer cached per exact type
        self._default: Serializer | None = None
        self._custom = CustomTypeSerializer(self)
        self._fallback = Pickle5Serializer(self._custom.reducers)
        for builtin in (self._custom, TorchSerializer(), NumpySerializer(), MsgspecSerializer()):
            self._add(builtin)
            self._auto.append(builtin)
        self._add(self._fallback)

    # -- registration -------------------------------------------------------------------

    def register(self, serializer: Serializer, *, replace: bool = False) -> None:
        """Add a serializer under `serializer.name`; it is picked automatically for the types
        its `handles_type` accepts (ahead of the built-ins), and is always usable by name."""
        if not isinstance(serializer, Serializer):
            raise TypeError(
                f"register() takes a zmesh.serializers.Serializer instance, got "
                f"{type_name(serializer)}"
            )
        name = getattr(serializer, "name", None)
        if not isinstance(name, str) or not name:
            raise ValueError(f"{serializer!r} has no name: set a non-empty str `name`")
        existing = self._by_name.get(name)
        if existing is not None and not replace:
            raise ValueError(
                f"a serializer named {name!r} is already registered ({existing!r}); pass "
                f"replace=True to replace it"
            )
        if existing is not None and existing in (self._fallback, self._custom):
            raise ValueError(f"the built-in serializer {name!r} cannot be replaced")
        if existing is not None:
            self._auto = [s for s in self._auto if s is not existing]
            if self._default is existing:
                self._default = serializer
        self._add(serializer)
        self._auto.insert(0, serializer)
        self._by_type.clear()

    def register_serializer(
        self,
        cls: type[T],
        *,
        serializer: Callable[[T], object],
        deserializer: Callable[[Any], T],
    ) -> None:
        """Serialize exact instances of `cls` as `serializer(obj)` (anything serializable),
        rebuilt by `deserializer(...)`. Register it in receiving processes too."""
        if not isinstance(cls, type):
            raise TypeError(f"register_serializer() takes a class, got {cls!r}")
        if not callable(serializer) or not callable(deserializer):
            raise TypeError(
                f"register_serializer({cls.__qualname__}) needs callable serializer and "
                f"deserializer, got {serializer!r} and {deserializer!r}"
            )
        self._custom.add(cls, serializer, deserializer)
        self._by_type.clear()

    def deregister_serializer(self, cls: type) -> None:
        """Forget `cls`'s registered functions; its values go back to the automatic pick."""
        if not self._custom.remove(cls):
            raise KeyError(f"no serializer is registered for {type_name(cls)}")
        self._by_type.clear()

    def set_default(self, name: str | None) -> None:
        """Use serializer `name` for every value not given one per call (None: pick per value)."""
        self._default = None if name is None else self.get(name)

    # -- lookup -------------------------------------------------------------------------

    def get(self, name: str) -> Serializer:
        """The serializer registered as `name`; a wrong name says which one was meant."""
        serializer = self._by_name.get(name) if isinstance(name, str) else None
        if serializer is None:
            raise SerializationError(self._unknown(name))
        return serializer

    def names(self) -> list[str]:
        """Registered serializer names, sorted."""
        return sorted(self._by_name)

    def pick(self, value: object) -> Serializer:
        """The serializer tried first for `value` (pickle5 takes what it declines)."""
        tp = type(value)
        serializer = self._by_type.get(tp)
        if serializer is None:
            serializer = self._pick_type(tp)
        return serializer

    # -- serialize / deserialize ----------------------------------------------------------

    def serialize(self, value: object, *, serializer: str | None = None) -> Serialized:
        """Encode `value` with the named serializer, the default, or the one picked for it."""
        if serializer is not None or self._default is not None:
            chosen = self.get(serializer) if serializer is not None else self._default
            assert chosen is not None
            header, buffers = self._call_serialize(chosen, value)
            return Serialized(chosen.name, header, buffers)
        tp = type(value)
        chosen = self._by_type.get(tp) or self._pick_type(tp)
        try:
            out = chosen.try_serialize(value)
        except SerializationError:
            raise
        except Exception as exc:
            raise self._serialize_failed(chosen, value, exc) from exc
        if out is None:
            chosen = self._fallback
            out = self._fallback.serialize(value)
        return Serialized(chosen.name, out[0], out[1])

    def deserialize(self, serialized: Serialized | SerializedParts, *, trusted: bool) -> object:
        """Rebuild a value; `trusted=False` (unauthenticated sender) refuses pickle and other
        trusted-only serializers with UntrustedSerializerError. Bad input raises
        SerializationError, never anything else."""
        try:
            name, header, buffers = serialized
        except (TypeError, ValueError):
            raise SerializationError(
                f"deserialize() takes a Serialized or a (name, header, buffers) triple, got "
                f"{type_name(serialized)}"
            ) from None
        if not isinstance(name, str):
            raise SerializationError(f"serializer name must be a str, got {type_name(name)}")
        chosen = self._by_name.get(name)
        if chosen is None:
            raise SerializationError(self._unknown(name))
        if chosen.trusted_only and not trusted:
            raise UntrustedSerializerError(
                f"refusing to deserialize with serializer {name!r}: it can run code on load and "
                f"is only accepted from authenticated (trusted) peers"
            )
        views = [_byte_view(b, name) for b in buffers] if buffers else []
        try:
            if chosen is self._custom:
                return self._custom.deserialize_with_trust(header, views, trusted)
            return chosen.deserialize(header, views)
        except SerializationError:
            raise
        except Exception as exc:
            raise SerializationError(
                f"cannot deserialize a value with serializer {name!r}: {type(exc).__name__}: {exc}"
            ) from exc

    # -- internals ----------------------------------------------------------------------

    def _add(self, serializer: Serializer) -> None:
        self._by_name[serializer.name] = serializer

    def _pick_type(self, tp: type) -> Serializer:
        chosen = next((s for s in self._auto if s.handles_type(tp)), self._fallback)
        self._by_type[tp] = chosen
        return chosen

    def _call_serialize(self, chosen: Serializer, value: object) -> tuple[bytes, list[Buffer]]:
        try:
            return chosen.serialize(value)
        except SerializationError:
            raise
        except Exception as exc:
            raise self._serialize_failed(chosen, value, exc) from exc

    @staticmethod
    def _serialize_failed(chosen: Serializer, value: object, exc: Exception) -> SerializationError:
        return SerializationError(
            f"cannot serialize {type_name(value)} with serializer {chosen.name!r}: "
            f"{type(exc).__name__}: {exc}"
        )

    def _unknown(self, name: object) -> str:
        close = difflib.get_close_matches(str(name), list(self._by_name), n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(self.names())}"
        return f"no serializer {name!r}; {hint}"


def _byte_view(buffer: Buffer, name: str) -> memoryview:
    """A flat unsigned-byte memoryview of `buffer` (no copy)."""
    try:
        view = memoryview(buffer)
        if view.ndim != 1 or view.format != "B":
            view = view.cast("B")
    except (TypeError, ValueError) as exc:
        raise SerializationError(
            f"cannot deserialize with serializer {name!r}: a buffer is not contiguous bytes "
            f"({type_name(buffer)}: {exc})"
        ) from None
    return view
