"""Hypothesis strategies that build any wire message from its msgspec schema.

Built from `msgspec.inspect` rather than `st.from_type` so that field constraints
(`Meta(ge=0)`, lengths, patterns) are honoured and every drawn message is valid.
"""

from __future__ import annotations

import datetime
from typing import Any

import msgspec
import msgspec.inspect as mi
from hypothesis import strategies as st

# msgpack ints are 64-bit; anything wider cannot be encoded at all.
INT_MIN, INT_MAX = -(2**63), 2**64 - 1
_MAX_DEPTH = 3


def _int_strategy(t: mi.IntType) -> st.SearchStrategy[int]:
    lo, hi = INT_MIN, INT_MAX
    if t.ge is not None:
        lo = max(lo, t.ge)
    if t.gt is not None:
        lo = max(lo, t.gt + 1)
    if t.le is not None:
        hi = min(hi, t.le)
    if t.lt is not None:
        hi = min(hi, t.lt - 1)
    ints = st.integers(lo, hi)
    if t.multiple_of:
        m = t.multiple_of
        ints = st.integers(-(-lo // m), hi // m).map(lambda k: k * m)
    return ints


def _sized(t: Any, elements: st.SearchStrategy[Any]) -> st.SearchStrategy[list[Any]]:
    lo = t.min_length or 0
    hi = t.max_length if t.max_length is not None else lo + 4
    return st.lists(elements, min_size=lo, max_size=hi)


def strategy_for(t: mi.Type, depth: int = 0) -> st.SearchStrategy[Any]:
    """A strategy drawing valid values of the msgspec-inspected type `t`."""
    deeper = depth + 1
    if isinstance(t, mi.Metadata):
        return strategy_for(t.type, depth)
    if isinstance(t, mi.AnyType):
        return st.none() | st.integers(INT_MIN, INT_MAX) | st.text(max_size=8)
    if isinstance(t, mi.NoneType):
        return st.none()
    if isinstance(t, mi.BoolType):
        return st.booleans()
    if isinstance(t, mi.IntType):
        return _int_strategy(t)
    if isinstance(t, mi.FloatType):
        return st.floats(
            min_value=t.ge if t.ge is not None else t.gt,
            max_value=t.le if t.le is not None else t.lt,
            exclude_min=t.gt is not None,
            exclude_max=t.lt is not None,
            allow_nan=False,
        )
    if isinstance(t, mi.StrType):
        if t.pattern is not None:
            return st.from_regex(t.pattern).filter(
                lambda s: (t.min_length or 0) <= len(s) <= (t.max_length or len(s))
            )
        return st.text(min_size=t.min_length or 0, max_size=t.max_length or 16)
    if isinstance(t, (mi.BytesType, mi.ByteArrayType, mi.MemoryViewType)):
        data = st.binary(min_size=t.min_length or 0, max_size=t.max_length or 32)
        if isinstance(t, mi.ByteArrayType):
            return data.map(bytearray)
        return data
    if isinstance(t, mi.LiteralType):
        return st.sampled_from(t.values)
    if isinstance(t, mi.EnumType):
        return st.sampled_from(list(t.cls))
    if isinstance(t, mi.UUIDType):
        return st.uuids()
    if isinstance(t, mi.DecimalType):
        return st.decimals(allow_nan=False, allow_infinity=False, places=4)
    if isinstance(t, mi.DateTimeType):
        tz = st.just(datetime.timezone.utc) if t.tz else st.none()
        return st.datetimes(timezones=tz)
    if isinstance(t, mi.DateType):
        return st.dates()
    if isinstance(t, mi.TimeType):
        return st.times()
    if isinstance(t, mi.TimeDeltaType):
        return st.timedeltas()
    if isinstance(t, (mi.ListType, mi.VarTupleType, mi.SetType, mi.FrozenSetType)):
        if depth >= _MAX_DEPTH and not t.min_length:
            return st.just([]).map(_container(t))
        items = strategy_for(t.item_type, deeper)
        return _sized(t, items).map(_container(t))
    if isinstance(t, mi.TupleType):
        return st.tuples(*(strategy_for(i, deeper) for i in t.item_types))
    if isinstance(t, mi.DictType):
        if depth >= _MAX_DEPTH and not t.min_length:
            return st.just({})
        keys = strategy_for(t.key_type, deeper)
        return _sized(t, st.tuples(keys, strategy_for(t.value_type, deeper))).map(dict)
    if isinstance(t, mi.StructType):
        return struct_strategy(t, depth)
    if isinstance(t, mi.UnionType):
        options = list(t.types)
        if depth >= _MAX_DEPTH and any(isinstance(o, mi.NoneType) for o in options):
            return st.none()
        return st.one_of(*(strategy_for(o, depth) for o in options))
    raise NotImplementedError(
        f"protocol_strategies cannot build {t!r}; add a case for it in "
        "tests/unit/protocol/protocol_strategies.py"
    )


def _container(t: mi.Type) -> Any:
    if isinstance(t, mi.VarTupleType):
        return tuple
    if isinstance(t, mi.SetType):
        return set
    if isinstance(t, mi.FrozenSetType):
        return frozenset
    return list


def struct_strategy(t: mi.StructType, depth: int = 0) -> st.SearchStrategy[Any]:
    """Instances of a struct type, required fields always drawn, defaulted ones sometimes."""
    fields: dict[str, st.SearchStrategy[Any]] = {}
    for f in t.fields:
        value = strategy_for(f.type, depth + 1)
        if f.required:
            fields[f.name] = value
        else:
            fields[f.name] = value | st.just(_default_of(f))
    return st.fixed_dictionaries(fields).map(lambda kw: t.cls(**kw))


def _default_of(f: mi.Field) -> Any:
    if f.default_factory is not msgspec.NODEFAULT:
        return f.default_factory()
    return f.default


def message_strategy(cls: type[msgspec.Struct]) -> st.SearchStrategy[Any]:
    """Valid instances of the message class `cls`."""
    info = mi.type_info(cls)
    assert isinstance(info, mi.StructType)
    return struct_strategy(info)
