"""`inspect_serializability`: find what inside an object cannot be pickled, as Ray's
`ray.util.inspect_serializability` does, printing the trail down to the culprits."""

from __future__ import annotations

import inspect as _inspect
import sys
from typing import Any, NamedTuple, TextIO

import cloudpickle


class FailureTuple(NamedTuple):
    """One member that cannot be serialized: the object, its name and its parent's name."""

    obj: Any
    name: str
    parent: Any

    def __repr__(self) -> str:
        return f"FailTuple({self.name} [obj={self.obj}, parent={self.parent}])"


def _picklable(obj: Any) -> bool:
    from zmesh.runtime import context

    try:
        with context.RefCollector():  # a trial: refs in it are not sent anywhere (no pin)
            cloudpickle.dumps(obj)
        return True
    except Exception:  # noqa: BLE001 - anything pickle raises means "not serializable"
        return False


def _members(obj: Any) -> list[tuple[str, Any]]:
    if _inspect.isfunction(obj):
        closure = _inspect.getclosurevars(obj)
        return [*closure.nonlocals.items(), *closure.globals.items()]
    if _inspect.isclass(obj):
        return [(k, v) for k, v in vars(obj).items() if not k.startswith("__")]
    if isinstance(obj, dict):
        return [(repr(k), v) for k, v in obj.items()]
    if isinstance(obj, list | tuple | set | frozenset):
        return [(f"[{i}]", v) for i, v in enumerate(obj)]
    members = getattr(obj, "__dict__", None)
    return list(members.items()) if isinstance(members, dict) else []


def inspect_serializability(base_obj: Any, name: str | None = None, depth: int = 3,
                            print_file: TextIO | None = None
                            ) -> tuple[bool, set[FailureTuple]]:
    """(serializable?, the innermost members that are not) for `base_obj`, printing a report."""
    out = print_file or sys.stdout
    name = name or getattr(base_obj, "__name__", None) or repr(base_obj)
    failures: set[FailureTuple] = set()
    print("=" * min(80, 30 + len(name)), file=out)
    print(f"Checking Serializability of {base_obj}", file=out)
    print("=" * min(80, 30 + len(name)), file=out)
    ok = _inspect_one(base_obj, name, depth, None, failures, out, level=0)
    if not ok:
        print("=" * 80, file=out)
        print("Variable: \n", file=out)
        for f in failures:
            print(f"\t{f}", file=out)
    return ok, failures


def _inspect_one(obj: Any, name: str, depth: int, parent: Any, failures: set[FailureTuple],
                 out: TextIO, level: int) -> bool:
    if _picklable(obj):
        return True
    pad = "    " * level
    print(f"{pad}!!! FAIL serialization: {name} ({type(obj).__name__})", file=out)
    found_inner = False
    if depth > 0:
        for member_name, member in _members(obj):
            if not _picklable(member):
                found_inner = True
                _inspect_one(member, member_name, depth - 1, name, failures, out, level + 1)
    if not found_inner:
        try:
            failures.add(FailureTuple(obj, name, parent))
        except TypeError:  # unhashable culprit: record its type
            failures.add(FailureTuple(type(obj), name, parent))
    return False
