"""Shared helpers for the serializer tests: exact comparison, value strategies, a user type.

A uniquely named module (not conftest) so that `import` cannot pick up another conftest.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from hypothesis import strategies as st

from zmesh.serializers import SerializerRegistry


class Point:
    """A user type registered with `register_serializer` in the `registry` fixture."""

    def __init__(self, x: int, y: int) -> None:
        self.x, self.y = x, y

    def __eq__(self, other: object) -> bool:
        return type(other) is Point and (self.x, self.y) == (other.x, other.y)

    def __hash__(self) -> int:
        return hash((self.x, self.y))


def point_to_plain(p: Point) -> dict[str, int]:
    return {"x": p.x, "y": p.y}


def point_from_plain(d: dict[str, int]) -> Point:
    return Point(d["x"], d["y"])


def make_registry() -> SerializerRegistry:
    """A fresh registry (tests may register into it) that knows `Point`."""
    reg = SerializerRegistry()
    reg.register_serializer(Point, serializer=point_to_plain, deserializer=point_from_plain)
    return reg


def assert_same(a: Any, b: Any, path: str = "value") -> None:
    """`b` equals `a` with the same types all the way down (1 is not 1.0 nor True)."""
    assert type(a) is type(b), f"{path}: {type(a).__name__} became {type(b).__name__}"
    if isinstance(a, float):
        assert (math.isnan(a) and math.isnan(b)) or (
            a == b and math.copysign(1, a) == math.copysign(1, b)
        ), f"{path}: {a!r} became {b!r}"
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), f"{path}: length {len(a)} became {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{path}[{i}]")
    elif isinstance(a, dict):
        assert len(a) == len(b), f"{path}: {len(a)} keys became {len(b)}"
        for (ka, va), (kb, vb) in zip(a.items(), b.items()):
            assert_same(ka, kb, f"{path} key {ka!r}")
            assert_same(va, vb, f"{path}[{ka!r}]")
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape, f"{path}: {a.dtype}{a.shape}"
        same = a.tobytes() == b.tobytes() if a.dtype.kind != "O" else a.tolist() == b.tolist()
        assert same, f"{path}: values differ"
    else:
        assert a == b, f"{path}: {a!r} became {b!r}"


hashables = st.recursive(
    st.integers() | st.text(max_size=8),
    lambda inner: st.tuples(inner, inner) | st.frozensets(inner, max_size=3),
    max_leaves=6,
)

atoms = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**100), max_value=2**100)
    | st.floats(allow_nan=True)
    | st.text(max_size=20)
    | st.binary(max_size=20)
)

plain_data = st.recursive(
    atoms,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(max_size=8), inner, max_size=4)
        | st.dictionaries(hashables, inner, max_size=3)
        | st.lists(inner, max_size=4).map(tuple)
        | st.sets(hashables, max_size=3)
        | st.frozensets(hashables, max_size=3)
    ),
    max_leaves=20,
)
