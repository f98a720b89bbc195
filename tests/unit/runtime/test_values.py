"""Values inline or stored (runtime/values.py): small results travel in the message, large
ones go to the store, whatever path their encoding takes."""

from __future__ import annotations

from typing import Any

import pytest

from zmesh.protocol.messages.runtime import StoreLoc
from zmesh.runtime import values
from zmesh.serializers import layout


class _Store:
    def __init__(self) -> None:
        self.blocks: dict[bytes, bytearray] = {}

    def allocate(self, object_id: bytes, size: int) -> tuple[StoreLoc, memoryview]:
        self.blocks[object_id] = bytearray(size)
        return StoreLoc(node="n", segment="s", offset=0, size=size), memoryview(self.blocks[object_id])

    def seal(self, object_id: bytes) -> None:
        pass


@pytest.mark.parametrize("obj", [0, -7, 2**70, 1.5, True, "text", b"raw", None, [1, (2, 3)],
                                 {"a": {1, 2}}])
def test_small_values_travel_inline_and_round_trip(obj: Any) -> None:
    store = _Store()
    value, refs = values.encode(obj, b"o1", allocate=store.allocate, seal=store.seal)
    assert value.loc is None and not refs and not store.blocks
    assert values.decode(value, None) == obj


@pytest.mark.parametrize("size", [values.INLINE_LIMIT - 2048, values.INLINE_LIMIT - 100,
                                  values.INLINE_LIMIT + 1])
def test_values_past_the_inline_limit_go_to_the_store(size: int) -> None:
    store = _Store()
    for obj in (b"x" * size, "y" * size):
        value, _ = values.encode(obj, b"o%d" % size, allocate=store.allocate, seal=store.seal)
        stored = value.loc is not None
        # the rule: stored when its packed layout is past the limit
        assert stored == (layout.packed_size(values.registry.serialize(obj)) >
                          values.INLINE_LIMIT)
        if not stored:
            assert values.decode(value, None) == obj
