"""The "msgspec" serializer: plain Python data as msgpack, exact round trip, no code on load.

msgpack alone would turn tuples and sets into lists and cannot hold big ints, so those travel
as msgpack extension types and come back as the same types. Subclasses (enums, named tuples,
str subclasses), floats' subclasses and every other type are declined, and the registry falls
back to pickle for them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from zmesh.errors import SerializationError
from zmesh.serializers.base import Buffer, Serializer, type_name

_EXT_TUPLE = 1
_EXT_SET = 2
_EXT_FROZENSET = 3
_EXT_DICT = 4  # keys that are not all str: a flat [k0, v0, k1, v1, ...] list
_EXT_BIGINT = 5  # outside msgpack's int64/uint64 range: decimal ASCII

_INT_MIN = -(2**63)
_INT_END = 2**64
_ATOMS = frozenset({str, float, bool, bytes, type(None)})


class _NotPlain(Exception):
    """Internal: the value holds something msgpack cannot carry faithfully."""

    def __init__(self, value: object) -> None:
        super().__init__(type_name(value))


_encoder = msgspec.msgpack.Encoder()


def _wire(value: Any) -> Any:
    """The msgpack-ready form of `value`: itself when already plain, else a converted copy."""
    tp = type(value)
    if tp in _ATOMS:
        return value
    if tp is int:
        if _INT_MIN <= value < _INT_END:
            return value
        return msgspec.msgpack.Ext(_EXT_BIGINT, str(value).encode())
    if tp is list:
        return _wire_list(value)
    if tp is dict:
        converted: dict[str, Any] | None = None
        for key, item in value.items():
            if type(key) is not str:
                return msgspec.msgpack.Ext(_EXT_DICT, _encoder.encode(_wire_pairs(value)))
            tp = type(item)
            if tp in _ATOMS or (tp is int and _INT_MIN <= item < _INT_END):
                continue
            new = _wire_list(item) if tp is list else _wire(item)
            if new is not item:
                if converted is None:
                    converted = dict(value)
                converted[key] = new
        return value if converted is None else converted
    if tp is tuple:
        return msgspec.msgpack.Ext(_EXT_TUPLE, _encoder.encode(_wire_list(value)))
    if tp is set:
        return msgspec.msgpack.Ext(_EXT_SET, _encoder.encode(_wire_list(value)))
    if tp is frozenset:
        return msgspec.msgpack.Ext(_EXT_FROZENSET, _encoder.encode(_wire_list(value)))
    raise _NotPlain(value)


def _wire_list(items: Any) -> Any:
    """A list's (or tuple's, set's) wire form; the list itself when nothing needs converting."""
    converted: list[Any] | None = None
    for i, item in enumerate(items):
        tp = type(item)
        if tp in _ATOMS or (tp is int and _INT_MIN <= item < _INT_END):
            continue
        new = _wire_list(item) if tp is list else _wire(item)
        if new is not item or type(items) is not list:
            if converted is None:
                converted = list(items)
            converted[i] = new
    if converted is not None:
        return converted
    return items if type(items) is list else list(items)


def _wire_pairs(mapping: dict[Any, Any]) -> list[Any]:
    flat: list[Any] = []
    for key, item in mapping.items():
        flat.append(_wire(key))
        flat.append(_wire(item))
    return flat


def _ext_hook(code: int, data: memoryview) -> Any:
    if code == _EXT_BIGINT:
        return int(bytes(data).decode("ascii"))
    items = _decoder.decode(data)
    if not isinstance(items, list):
        raise ValueError(f"extension {code} holds a {type(items).__name__}, not a list")
    if code == _EXT_TUPLE:
        return tuple(items)
    if code == _EXT_SET:
        return set(items)
    if code == _EXT_FROZENSET:
        return frozenset(items)
    if code == _EXT_DICT:
        if len(items) % 2:
            raise ValueError("extension dict holds an odd number of keys and values")
        return dict(zip(items[0::2], items[1::2]))
    raise ValueError(f"unknown msgpack extension code {code}")


_decoder = msgspec.msgpack.Decoder(ext_hook=_ext_hook)


class MsgspecSerializer(Serializer):
    """Plain data (None, bool, int, float, str, bytes, list, dict, tuple, set, frozenset)."""

    name = "msgspec"
    trusted_only = False

    def handles_type(self, tp: type) -> bool:
        return tp in _ATOMS or tp in (int, list, dict, tuple, set, frozenset)

    def can_serialize(self, value: object) -> bool:
        try:
            _wire(value)
        except (_NotPlain, RecursionError):
            return False
        return True

    def try_serialize(self, value: object) -> tuple[bytes, list[Buffer]] | None:
        try:
            return _encoder.encode(_wire(value)), []
        except (_NotPlain, RecursionError):
            return None

    def serialize(self, value: object) -> tuple[bytes, list[Buffer]]:
        try:
            return _encoder.encode(_wire(value)), []
        except _NotPlain as exc:
            raise SerializationError(
                f"cannot serialize {type_name(value)} with serializer 'msgspec': it holds a "
                f"{exc}, which is not plain data (use 'pickle5' for arbitrary objects)"
            ) from None
        except RecursionError:
            raise SerializationError(
                f"cannot serialize {type_name(value)} with serializer 'msgspec': nested too deeply"
            ) from None

    def deserialize(self, header: bytes, buffers: Sequence[memoryview]) -> object:
        if buffers:
            raise SerializationError(
                f"cannot deserialize plain data with serializer 'msgspec': expected no "
                f"buffers, got {len(buffers)}"
            )
        try:
            return _decoder.decode(header)
        except (msgspec.DecodeError, ValueError, TypeError, RecursionError) as exc:
            raise SerializationError(
                f"cannot deserialize plain data with serializer 'msgspec': {exc}"
            ) from None
