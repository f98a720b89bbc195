"""Packing call arguments: top-level refs become placeholders resolved before the call.

Refs at the top level of args/kwargs are taken out (their slots hold None) and their values
sent alongside, so the callee gets values; refs nested in containers travel as refs. The
data is `[args, kwargs, slots]` (slots: each top ref's position or keyword), plain lists so
that plain arguments take the msgspec serializer, not pickle; arguments that are all refs
(a chain: `f.remote(ref)`) are the one byte `ONLY_REFS`, with nothing to serialize at all.
"""

from __future__ import annotations

from typing import Any

import zmesh.serializers as registry
from zmesh.object_ref import ObjectRef
from zmesh.protocol.messages.runtime import Args, Value
from zmesh.runtime import context, values

ONLY_REFS = b"\x02"
"""The data of arguments that are all top-level refs, positional: the values are the call's
arguments in order. (Inline values start with 1, stored layouts with their magic.)"""


def pack_args(args: tuple[Any, ...], kwargs: dict[str, Any]
              ) -> tuple[bytes, list[ObjectRef], list[ObjectRef]]:
    """(packed data, top-level refs, refs nested inside values)."""
    if not args and not kwargs:
        return b"", [], []
    top: list[ObjectRef] = []
    slots: list[int | str] = []
    a = list(args)
    for i, v in enumerate(a):
        if type(v) is ObjectRef:
            top.append(v)
            slots.append(i)
            a[i] = None
    if not kwargs:
        if len(top) == len(a):
            return ONLY_REFS, top, []
        k: dict[str, Any] = {}
    else:
        k = dict(kwargs)
        for key, v in k.items():
            if type(v) is ObjectRef:
                top.append(v)
                slots.append(key)
                k[key] = None
    s, nested = values.serialize([a, k, slots])
    if s.nbytes > values.INLINE_LIMIT:
        # too big to travel in the message (a large value, or a huge argument list): the
        # whole [args, kwargs, slots] goes to the store as one object, passed as one more
        # top ref, whose index the data's fourth item names
        whole = context.current_client().put([a, k, slots])
        s, nested = values.serialize([[], {}, [], len(top)])
        top.append(whole)
    return values.pack(s), top, nested


def unpack_args(packed: Args, read: values.Reader | None
                ) -> tuple[tuple[Any, ...], dict[str, Any], list[Any]]:
    """(args, kwargs, refs deserialized from the data); raises the error of a failed ref arg."""
    data = packed.data
    if not data:
        return (), {}, []
    if data == ONLY_REFS:
        with context.RefCollector() as inner:  # refs inside the values are the task's too
            out = tuple([_value(v, read) for v in packed.refs])
        return out, {}, inner.refs
    with context.RefCollector() as collected:
        raw: Any = registry.deserialize(values.unpack(data), trusted=True)
    a, k, slots = raw[0], raw[1], raw[2]
    refs = collected.refs
    if packed.refs:
        spilled = raw[3] if len(raw) == 4 else -1
        resolved: list[Any] = []
        # refs inside the values of top-level refs (and inside the spilled arguments) are
        # the task's too: the caller holds those values until it has the answer, so the
        # worker reports the ones it still holds then (it does not hold the values' refs)
        with context.RefCollector() as inner:
            for i, v in enumerate(packed.refs):
                if i == spilled:
                    a, k, slots = _value(v, read)
                else:
                    resolved.append(_value(v, read))
        refs = refs + inner.refs
        for slot, value in zip(slots, resolved):
            if type(slot) is int:
                a[slot] = value
            else:
                k[slot] = value
    return tuple(a), k, refs


def _value(v: Value, read: values.Reader | None) -> Any:
    return values.raise_if_error(v, values.decode(v, read))
