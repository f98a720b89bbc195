"""The "pickle5" serializer: anything cloudpickle can pickle, with protocol-5 out-of-band buffers.

numpy arrays (numpy's own protocol-5 support) and CPU torch tensors (a reducer here) inside
any structure travel as separate buffers, never copied into the pickle stream. Exceptions keep
their traceback text, cause and context. Types registered with `register_serializer` are
reduced through their registered functions wherever they appear. Loading runs code, so this
serializer is trusted-only.
"""

from __future__ import annotations

import io
import pickle
import sys
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import cloudpickle

from zmesh.errors import SerializationError
from zmesh.serializers.base import Buffer, Serializer
from zmesh.serializers.remote_exceptions import reduce_exception
from zmesh.serializers.torch_tensor import tensor_from_parts, tensor_supported, tensor_to_parts
from zmesh.serializers.unpicklable import describe_unpicklable

#: type -> (to_serializable, from_serializable), as given to `register_serializer`.
CustomReducers = Mapping[type, tuple[Callable[[Any], object], Callable[[Any], Any]]]


# Classes cloudpickle pickles by reference (importable by module and name): it looks each up
# in its module whenever an instance is pickled (a task's argument placeholder, a user's
# dataclass), so the answer is kept. Weak: a class that goes away is forgotten.
_BY_REFERENCE: weakref.WeakSet[type] = weakref.WeakSet()


def _load_tensor(header: bytes, buffer: Any) -> Any:
    return tensor_from_parts(header, memoryview(buffer).cast("B"))


class _Pickler(cloudpickle.Pickler):  # type: ignore[misc]
    def __init__(
        self,
        file: io.BytesIO,
        buffer_callback: Callable[[pickle.PickleBuffer], object] | None,
        custom: CustomReducers,
    ) -> None:
        super().__init__(file, protocol=5, buffer_callback=buffer_callback)
        self._custom = custom
        self._exceptions_in_progress: set[int] = set()

    def reducer_override(self, obj: Any) -> Any:
        tp = type(obj)
        if tp is type and obj in _BY_REFERENCE:
            return NotImplemented  # an importable class: pickled by reference, as before
        custom = self._custom.get(tp) if self._custom else None
        if custom is not None:
            to_serializable, from_serializable = custom
            return from_serializable, (to_serializable(obj),)
        torch = sys.modules.get("torch")
        if (
            torch is not None
            and (tp is torch.Tensor or tp is torch.nn.Parameter)
            and tensor_supported(obj)
        ):
            header, buffer = tensor_to_parts(obj)
            return _load_tensor, (header, pickle.PickleBuffer(buffer))
        if isinstance(obj, BaseException) and id(obj) not in self._exceptions_in_progress:
            # A cause/context chain that loops back gets the default reduce on the way round.
            self._exceptions_in_progress.add(id(obj))
            return reduce_exception(obj)
        out = super().reducer_override(obj)
        if out is NotImplemented and tp is type:
            _BY_REFERENCE.add(obj)
        return out


def dumps(
    value: object,
    buffer_callback: Callable[[pickle.PickleBuffer], object] | None = None,
    custom: CustomReducers | None = None,
) -> bytes:
    """cloudpickle protocol 5 with zmesh's reducers (tensors, exceptions, custom types)."""
    with io.BytesIO() as file:
        _Pickler(file, buffer_callback, custom or {}).dump(value)
        return file.getvalue()


class Pickle5Serializer(Serializer):
    """Any picklable value; the fallback when no other serializer takes a value."""

    name = "pickle5"
    trusted_only = True

    def __init__(self, custom: CustomReducers | None = None) -> None:
        # A live view of the registry's custom types, so later registrations apply.
        self._custom: CustomReducers = custom if custom is not None else {}

    def can_serialize(self, value: object) -> bool:
        try:
            dumps(value, lambda _: None, self._custom)
        except Exception:
            return False
        return True

    def try_serialize(self, value: object) -> tuple[bytes, list[Buffer]]:
        return self.serialize(value)

    def serialize(self, value: object) -> tuple[bytes, list[Buffer]]:
        out_of_band: list[pickle.PickleBuffer] = []
        try:
            data = dumps(value, out_of_band.append, self._custom)
        except Exception as exc:
            message = describe_unpicklable(value, self._probe, exc)
            raise SerializationError(f"{message} [serializer 'pickle5']") from exc
        return data, [buffer.raw() for buffer in out_of_band]

    def _probe(self, value: object) -> object:
        return dumps(value, lambda _: None, self._custom)

    def deserialize(self, header: bytes, buffers: Sequence[memoryview]) -> object:
        try:
            return pickle.loads(header, buffers=buffers)
        except SerializationError:
            raise
        except Exception as exc:
            raise SerializationError(
                f"cannot deserialize a pickled value with serializer 'pickle5': "
                f"{type(exc).__name__}: {exc}"
            ) from exc
