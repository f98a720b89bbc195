"""Packing call arguments (runtime/args.py): top-level refs travel beside the data and come
back as their values in their slots; arguments that are all refs need no serializer."""

from __future__ import annotations

from typing import Any

import pytest

from zmesh.object_ref import ObjectRef
from zmesh.protocol.messages.runtime import Args
from zmesh.runtime import values
from zmesh.runtime.args import ONLY_REFS, pack_args, unpack_args
from zmesh.task_error import TaskError


class _Objects:
    def incref(self, object_id: bytes, owner: str) -> None:
        pass

    def decref(self, object_id: bytes) -> None:
        pass


class _Client:
    objects = _Objects()
    closed = False


def _ref(n: int) -> ObjectRef:
    return ObjectRef(b"obj%05d" % n, "ipc:///owner", _Client())


def _roundtrip(args: tuple[Any, ...], kwargs: dict[str, Any], vals: dict[bytes, Any]
               ) -> tuple[tuple[Any, ...], dict[str, Any]]:
    data, top, nested = pack_args(args, kwargs)
    assert not nested
    refs = [values.encode(vals[r.id], r.id, allocate=None, seal=None)[0] for r in top]
    a, k, collected = unpack_args(Args(data=data, refs=refs), None)
    assert not collected
    return a, k


def test_arguments_that_are_all_refs_are_one_byte() -> None:
    r1, r2 = _ref(1), _ref(2)
    data, top, nested = pack_args((r1, r2), {})
    assert data == ONLY_REFS and top == [r1, r2] and nested == []
    assert _roundtrip((r1, r2), {}, {r1.id: 10, r2.id: [1, 2]}) == ((10, [1, 2]), {})


@pytest.mark.parametrize("args,kwargs", [
    ((1, "x", (2, 3)), {}),
    ((), {"a": 1, "b": {4, 5}}),
    ((None, 2.5), {"c": None}),
    ((object.__name__, b"raw", frozenset({1})), {"d": [1, (2,)]}),
])
def test_plain_arguments_mixed_with_refs_come_back_in_their_slots(
        args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    r1, r2 = _ref(1), _ref(2)
    vals = {r1.id: "first", r2.id: (1, 2)}
    mixed = (r1,) + args + (r2,)
    kw = {**kwargs, "ref": r2}
    data, _, _ = pack_args(mixed, kw)
    assert data.startswith(b"\x01msgspec\x00")  # plain: no pickle
    assert _roundtrip(mixed, kw, vals) == (("first",) + args + ((1, 2),), {**kwargs,
                                                                         "ref": (1, 2)})


def test_arguments_without_refs_and_objects_pickle_round_trip() -> None:
    class Box:
        def __init__(self, v: int) -> None:
            self.v = v

    r = _ref(3)
    a, k = _roundtrip((Box(4), r), {"n": None}, {r.id: 7})
    assert a[0].v == 4 and a[1] == 7 and k == {"n": None}
    assert _roundtrip((1, 2), {}, {}) == ((1, 2), {})
    assert pack_args((), {}) == (b"", [], [])


def test_a_failed_ref_argument_raises_its_error() -> None:
    r = _ref(4)
    data, top, _ = pack_args((r,), {})
    err = values.encode_error(TaskError("f", "Traceback: boom", ValueError("boom"), 1))
    with pytest.raises(ValueError, match="boom"):
        unpack_args(Args(data=data, refs=[err]), None)
