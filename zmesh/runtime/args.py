"""Packing call arguments: top-level refs become placeholders resolved before the call.

Refs at the top level of args/kwargs are replaced by `ArgRef(i)` and their values sent
alongside, so the callee gets values; refs nested in containers travel as refs.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import zmesh.serializers as registry
from zmesh.object_ref import ObjectRef
from zmesh.protocol.messages.runtime import Args, Value
from zmesh.runtime import context, values


class ArgRef(NamedTuple):
    """Placeholder for the value of the i-th top-level ref argument."""

    index: int  # type: ignore[assignment]


class SpilledArgs(NamedTuple):
    """Placeholder for arguments too big to inline: the i-th top-level ref holds
    (args, kwargs)."""

    index: int  # type: ignore[assignment]


def pack_args(args: tuple[Any, ...], kwargs: dict[str, Any]
              ) -> tuple[bytes, list[ObjectRef], list[ObjectRef]]:
    """(packed data, top-level refs, refs nested inside values)."""
    if not args and not kwargs:
        return b"", [], []
    top: list[ObjectRef] = []

    def swap(v: Any) -> Any:
        if type(v) is ObjectRef:
            top.append(v)
            return ArgRef(len(top) - 1)
        return v

    a = tuple(swap(v) for v in args)
    k = {key: swap(v) for key, v in kwargs.items()} if kwargs else {}
    s, nested = values.serialize((a, k))
    if s.nbytes > values.INLINE_LIMIT:
        # too big to travel in the message (a large value, or a huge argument list): the
        # whole (args, kwargs) goes to the store as one object, passed as one more top ref
        whole = context.current_client().put((a, k))
        spilled = SpilledArgs(len(top))
        top.append(whole)
        s, nested = values.serialize(((spilled,), {}))
    return values.pack(s), top, nested


def unpack_args(packed: Args, read: values.Reader | None
                ) -> tuple[tuple[Any, ...], dict[str, Any], list[Any]]:
    """(args, kwargs, refs deserialized from the data); raises the error of a failed ref arg."""
    if not packed.data:
        return (), {}, []
    with context.RefCollector() as collected:
        raw = registry.deserialize(values.unpack(packed.data), trusted=True)
    a, k = raw
    refs = collected.refs
    if packed.refs:
        spilled = a[0].index if len(a) == 1 and not k and type(a[0]) is SpilledArgs else -1
        resolved: list[Any] = []
        for i, v in enumerate(packed.refs):
            if i == spilled:  # the arguments themselves: refs inside are the task's too
                with context.RefCollector() as inner:
                    a, k = _value(v, read)
                refs = refs + inner.refs
                resolved.append(None)
            else:
                resolved.append(_value(v, read))
        a = tuple(resolved[v.index] if type(v) is ArgRef else v for v in a)
        k = {key: resolved[v.index] if type(v) is ArgRef else v for key, v in k.items()}
    return a, k, refs


def _value(v: Value, read: values.Reader | None) -> Any:
    return values.raise_if_error(v, values.decode(v, read))
