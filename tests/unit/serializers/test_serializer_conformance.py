"""One conformance suite run against every serializer a registry holds."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from serializer_helpers import Point, assert_same, plain_data

from zmesh.errors import SerializationError
from zmesh.serializers import Serialized, SerializerRegistry

HAS_TORCH = importlib.util.find_spec("torch") is not None


def _tensors() -> list[object]:
    import torch

    base = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4)
    return [base, base.permute(2, 0, 1), base[:, ::2], torch.tensor(7), torch.zeros(0, 5)]


class _Opaque:
    """An arbitrary user object: only pickle takes it."""

    def __init__(self) -> None:
        self.payload = {"k": [1, 2]}

    def __eq__(self, other: object) -> bool:
        return type(other) is _Opaque and other.payload == self.payload


# Values each serializer must round-trip, by serializer name.
SAMPLES: dict[str, Callable[[], list[object]]] = {
    "msgspec": lambda: [None, True, 0, -(2**63), 2**64 - 1, 2**200, 1.5, "é", b"\x00",
                        [1, [2]], {"a": {"b": None}}, (1, (2,)), {1, 2}, frozenset({"x"}),
                        {(1, 2): "tuple key", 3: [4]}, (), [], {}],
    "pickle5": lambda: [_Opaque(), {"arr": np.arange(5)}, (1, "two", 3.0), Point(1, 2),
                        ValueError("boom"), np.float64(2.5), bytearray(b"abc")],
    "numpy": lambda: [np.arange(10), np.ones((3, 4), order="F"), np.array(3.0),
                      np.zeros((0, 3)), np.arange(12).reshape(3, 4)[:, ::2],
                      np.arange(4, dtype=">i8"), np.array(["a", "bc"])],
    "torch": lambda: _tensors() if HAS_TORCH else [],
    "custom": lambda: [Point(3, 4), Point(-1, 0)],
}  # fmt: skip

SERIALIZER_NAMES = SerializerRegistry().names()


def _same(a: object, b: object) -> None:
    if HAS_TORCH:
        import torch

        if isinstance(a, torch.Tensor):
            assert type(a) is type(b) and a.dtype == b.dtype and a.shape == b.shape
            assert torch.equal(a, b)
            return
    if isinstance(a, BaseException):
        assert type(a) is type(b) and a.args == b.args
        return
    assert_same(a, b)


def test_every_registered_serializer_has_conformance_samples() -> None:
    assert set(SERIALIZER_NAMES) == set(SAMPLES)


@pytest.mark.parametrize("name", SERIALIZER_NAMES)
def test_samples_round_trip_exactly_by_name(registry: SerializerRegistry, name: str) -> None:
    if name == "torch" and not HAS_TORCH:
        pytest.skip("torch is not installed")
    serializer = registry.get(name)
    for value in SAMPLES[name]():
        assert serializer.can_serialize(value), f"{name} declines {value!r}"
        s = registry.serialize(value, serializer=name)
        assert s.name == name and isinstance(s.header, bytes)
        assert all(isinstance(memoryview(b), memoryview) for b in s.buffers)
        # Received buffers are read-only copies, as from a socket.
        received = Serialized(s.name, s.header, [bytes(b) for b in s.buffers])
        _same(value, registry.deserialize(received, trusted=True))


@pytest.mark.parametrize("name", SERIALIZER_NAMES)
def test_serializer_refuses_what_it_cannot_take_with_serialization_error(
    registry: SerializerRegistry, name: str
) -> None:
    lock_like = __import__("threading").Lock()
    serializer = registry.get(name)
    assert not serializer.can_serialize(lock_like)
    with pytest.raises(SerializationError, match=name if name != "pickle5" else "lock"):
        registry.serialize(lock_like, serializer=name)


@pytest.mark.parametrize("name", SERIALIZER_NAMES)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(header=st.binary(max_size=64), buffers=st.lists(st.binary(max_size=64), max_size=3))
def test_garbage_input_only_raises_serialization_error(
    registry: SerializerRegistry, name: str, header: bytes, buffers: list[bytes]
) -> None:
    try:
        registry.deserialize((name, header, buffers), trusted=True)
    except SerializationError:
        pass


@pytest.mark.parametrize("name", SERIALIZER_NAMES)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_corrupted_valid_payloads_only_raise_serialization_error(
    registry: SerializerRegistry, name: str, data: st.DataObject
) -> None:
    values = SAMPLES[name]()
    if not values:
        pytest.skip(f"no samples for {name} here")
    s = registry.serialize(data.draw(st.sampled_from(values)), serializer=name)
    header = bytearray(s.header)
    if header:
        for _ in range(data.draw(st.integers(1, 3))):
            i = data.draw(st.integers(0, len(header) - 1))
            header[i] = data.draw(st.integers(0, 255))
    buffers = [bytes(b) for b in s.buffers]
    if buffers and data.draw(st.booleans()):
        buffers[0] = buffers[0][: data.draw(st.integers(0, len(buffers[0])))]
    try:
        registry.deserialize((name, bytes(header), buffers), trusted=True)
    except SerializationError:
        pass


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=plain_data)
def test_plain_data_round_trips_exactly_through_auto_pick_and_msgspec(
    registry: SerializerRegistry, value: object
) -> None:
    s = registry.serialize(value)
    assert s.name == "msgspec"
    assert_same(value, registry.deserialize(s, trusted=False))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=plain_data)
def test_plain_data_round_trips_exactly_through_pickle5(
    registry: SerializerRegistry, value: object
) -> None:
    s = registry.serialize(value, serializer="pickle5")
    assert_same(value, registry.deserialize(s, trusted=True))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=plain_data, key=st.text(max_size=5))
def test_containers_holding_arrays_go_to_pickle5_and_round_trip(
    registry: SerializerRegistry, value: object, key: str
) -> None:
    holder = {key: value, "__array__": np.arange(6, dtype=np.int16).reshape(2, 3)}
    s = registry.serialize(holder)
    assert s.name == "pickle5"
    assert len(s.buffers) == 1  # the array travels out of band
    assert_same(holder, registry.deserialize(s, trusted=True))
