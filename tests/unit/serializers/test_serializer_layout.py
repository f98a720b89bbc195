"""Flat object-store layout and zmq multipart frames: round trips, alignment, zero copy."""

from __future__ import annotations

import mmap

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from serializer_helpers import assert_same, plain_data

from zmesh.errors import SerializationError
from zmesh.serializers import (
    Serialized,
    SerializerRegistry,
    from_frames,
    pack_into,
    packed_size,
    to_frames,
    unpack_from,
)
from zmesh.serializers.layout import ALIGN


def packed(s: Serialized) -> bytearray:
    dest = bytearray(packed_size(s))
    pack_into(s, memoryview(dest))
    return dest


@settings(max_examples=60, deadline=None)
@given(
    name=st.text(min_size=1, max_size=10),
    header=st.binary(max_size=100),
    buffers=st.lists(st.binary(max_size=200), max_size=5),
)
def test_pack_unpack_round_trips_parts_with_aligned_buffers(
    name: str, header: bytes, buffers: list[bytes]
) -> None:
    s = Serialized(name, header, list(buffers))
    dest = packed(s)
    assert len(dest) == packed_size(s)
    out = unpack_from(memoryview(dest))
    assert out.name == name and out.header == header
    assert [bytes(b) for b in out.buffers] == buffers
    base = np.frombuffer(dest, np.uint8).ctypes.data
    for b in out.buffers:
        assert (np.frombuffer(b, np.uint8).ctypes.data - base) % ALIGN == 0 if len(b) else True


def test_unpacked_array_views_the_store_memory_without_copy() -> None:
    registry = SerializerRegistry()
    value = {"w": np.random.default_rng(0).standard_normal((300, 200)), "step": 4}
    s = registry.serialize(value)
    with mmap.mmap(-1, packed_size(s)) as store:
        view = memoryview(store)
        try:
            pack_into(s, view)
            out = registry.deserialize(unpack_from(view), trusted=True)
            assert np.shares_memory(out["w"], np.frombuffer(store, np.uint8))
            assert np.frombuffer(store, np.uint8).ctypes.data % ALIGN == 0
            assert out["w"].ctypes.data % ALIGN == 0, "buffers land 64-byte aligned"
            assert_same(value, out)
            del out
        finally:
            view.release()


def test_pack_into_refuses_small_or_read_only_destinations() -> None:
    s = Serialized("numpy", b"h", [b"x" * 100])
    with pytest.raises(ValueError, match=rf"needs {packed_size(s)} bytes, destination has 10"):
        pack_into(s, memoryview(bytearray(10)))
    with pytest.raises(ValueError, match="read-only"):
        pack_into(s, memoryview(bytes(packed_size(s))))


def test_pack_into_zeroes_alignment_gaps() -> None:
    s = Serialized("n", b"", [b"\xff" * 3, b"\xff" * 3])
    dest = bytearray(b"\xaa" * packed_size(s))
    pack_into(s, memoryview(dest))
    assert b"\xaa" not in dest


@settings(max_examples=100, deadline=None)
@given(data=st.binary(max_size=300))
def test_unpack_from_garbage_only_raises_serialization_error(data: bytes) -> None:
    try:
        unpack_from(memoryview(data))
    except SerializationError:
        pass


@settings(max_examples=60, deadline=None)
@given(cut=st.integers(min_value=0, max_value=10_000), flip=st.integers(0, 255))
def test_truncated_or_corrupted_packed_values_only_raise_serialization_error(
    cut: int, flip: int
) -> None:
    s = SerializerRegistry().serialize(np.arange(100.0))
    dest = packed(s)
    dest[min(cut, len(dest) - 1)] ^= flip
    try:
        unpack_from(memoryview(dest)[: max(0, len(dest) - cut)])
    except SerializationError:
        pass


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=plain_data)
def test_frames_round_trip_plain_values(registry: SerializerRegistry, value: object) -> None:
    frames = [bytes(f) for f in to_frames(registry.serialize(value))]
    assert_same(value, registry.deserialize(from_frames(frames), trusted=False))


def test_frames_carry_buffers_as_is_and_decode_zero_copy(registry: SerializerRegistry) -> None:
    array = np.arange(50_000, dtype=np.float32)
    frames = to_frames(registry.serialize(array))
    assert len(frames) == 2 and np.shares_memory(array, np.frombuffer(frames[1], np.uint8))
    received = [bytes(f) for f in frames]
    out = registry.deserialize(from_frames(received), trusted=False)
    assert np.shares_memory(out, np.frombuffer(received[1], np.uint8))


def test_from_frames_checks_the_buffer_count(registry: SerializerRegistry) -> None:
    frames = to_frames(registry.serialize(np.ones(4)))
    with pytest.raises(SerializationError, match="announces 1 buffers, got 0"):
        from_frames(frames[:1])
    with pytest.raises(SerializationError, match="no frames"):
        from_frames([])
    with pytest.raises(SerializationError, match="bad serializer head frame"):
        from_frames([b"\xc1garbage"])
