"""Finding which part of a value cannot be pickled, for an error that points at it.

"cannot pickle '_thread.lock' object" says nothing about where the lock is. After a pickle
fails, this walks the value (attributes, slots, container items, closure cells and globals
of functions) and pickles each piece on its own to find the innermost one that fails.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterator
from typing import Any

from zmesh.serializers.base import type_name

_MAX_DEPTH = 40


def _children(value: Any) -> Iterator[tuple[str, str, Any]]:
    """(kind, path suffix, child) for each part pickle would have to pickle."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield "item", f"[{key!r}]", item
        return
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield "item", f"[{i}]", item
        return
    if isinstance(value, (set, frozenset)):
        for item in value:
            yield "item", f"{{{item!r}}}", item
        return
    if isinstance(value, types.MethodType):
        yield "attribute", ".__self__", value.__self__
        yield "attribute", ".__func__", value.__func__
        return
    if isinstance(value, types.FunctionType):
        names = value.__code__.co_freevars
        for name, cell in zip(names, value.__closure__ or ()):
            try:
                contents = cell.cell_contents
            except ValueError:  # empty cell
                continue
            yield "closure variable", f".<closure {name}>", contents
        for name in value.__code__.co_names:
            if name in value.__globals__:
                yield "global", f".<global {name}>", value.__globals__[name]
        return
    if isinstance(value, (type, types.ModuleType)):
        return
    state = getattr(value, "__dict__", None)
    if isinstance(state, dict):
        for name, item in state.items():
            yield "attribute", f".{name}", item
    for cls in type(value).__mro__:
        for name in getattr(cls, "__slots__", ()):
            if name in ("__dict__", "__weakref__"):
                continue
            try:
                item = getattr(value, name)
            except AttributeError:
                continue
            yield "attribute", f".{name}", item


def find_unpicklable(
    value: Any, dumps: Callable[[Any], object]
) -> tuple[str, str, Any, BaseException] | None:
    """(kind, path, culprit, error) for the innermost part of `value` that `dumps` rejects.

    The path starts at "self" for an object with attributes, at the name of a function,
    else at "value". Returns None when `value` pickles after all.
    """
    try:
        dumps(value)
    except Exception as exc:
        error: BaseException = exc
    else:
        return None
    if isinstance(value, (types.FunctionType, types.MethodType)):
        root = value.__qualname__
    elif hasattr(value, "__dict__") and not isinstance(value, type):
        root = "self"
    else:
        root = "value"
    kind, path, culprit = "value", root, value
    seen = {id(value)}
    for _ in range(_MAX_DEPTH):
        for child_kind, suffix, child in _children(culprit):
            if id(child) in seen:
                continue
            try:
                dumps(child)
            except Exception as exc:
                seen.add(id(child))
                kind, path, culprit, error = child_kind, path + suffix, child, exc
                break
        else:
            break  # no single child fails: the culprit itself is what cannot be pickled
    return kind, path, culprit, error


def describe_unpicklable(value: Any, dumps: Callable[[Any], object], error: BaseException) -> str:
    """An error message naming the offending attribute path, e.g.

    cannot serialize Trainer: attribute 'self.logger.lock' is a _thread.lock, which cannot
    be pickled (cannot pickle '_thread.lock' object)
    """
    what = type(value).__qualname__
    if isinstance(value, (types.FunctionType, types.MethodType)):
        what = f"{what} {value.__qualname__}"
    found = find_unpicklable(value, dumps)
    if found is None or found[2] is value:
        reason = found[3] if found is not None else error
        return f"cannot serialize {what}: it cannot be pickled ({reason})"
    kind, path, culprit, reason = found
    return (
        f"cannot serialize {what}: {kind} '{path}' is a {type_name(culprit)}, "
        f"which cannot be pickled ({reason})"
    )
