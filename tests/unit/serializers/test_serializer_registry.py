"""The registry: automatic pick, user types and serializers, names, trust, and error messages."""

from __future__ import annotations

import threading
import types
from collections.abc import Sequence

import numpy as np
import pytest
from serializer_helpers import Point

import zmesh.serializers as zs
from zmesh.errors import SerializationError, UntrustedSerializerError
from zmesh.serializers import Buffer, Serialized, Serializer, SerializerRegistry, remote_traceback


@pytest.mark.parametrize(
    ("value", "name"),
    [
        (None, "msgspec"),
        (1, "msgspec"),
        ({"a": [1, (2, 3)]}, "msgspec"),
        ({"a": object()}, "pickle5"),
        ([1, np.ones(2)], "pickle5"),
        (np.ones(3), "numpy"),
        (np.array([None]), "pickle5"),
        (Point(1, 2), "custom"),
        (types.SimpleNamespace(a=1), "pickle5"),
        (len, "pickle5"),
    ],
)
def test_auto_pick_chooses_the_cheapest_faithful_serializer(
    registry: SerializerRegistry, value: object, name: str
) -> None:
    assert registry.serialize(value).name == name


def test_wrong_serializer_name_suggests_the_closest(registry: SerializerRegistry) -> None:
    with pytest.raises(SerializationError, match=r"no serializer 'pikle5'; did you mean 'pickle5'\?"):
        registry.serialize(1, serializer="pikle5")
    with pytest.raises(SerializationError, match=r"no serializer 'zzz'; known: custom, msgspec"):
        registry.deserialize(("zzz", b"", []), trusted=True)


def test_untrusted_peers_cannot_make_us_unpickle(registry: SerializerRegistry) -> None:
    s = registry.serialize({"a": object()})
    with pytest.raises(UntrustedSerializerError, match="'pickle5'"):
        registry.deserialize(s, trusted=False)
    assert registry.deserialize(registry.serialize([1, 2]), trusted=False) == [1, 2]


def test_custom_type_reduced_to_pickle_is_refused_from_untrusted_peers(
    registry: SerializerRegistry,
) -> None:
    class Handle:
        def __init__(self, obj: object) -> None:
            self.obj = obj

    registry.register_serializer(Handle, serializer=lambda h: h.obj, deserializer=Handle)
    s = registry.serialize(Handle(object()))
    assert s.name == "custom"
    with pytest.raises(UntrustedSerializerError, match="'pickle5'"):
        registry.deserialize(s, trusted=False)
    assert type(registry.deserialize(s, trusted=True)) is Handle


def test_registered_user_type_round_trips_without_pickle(registry: SerializerRegistry) -> None:
    s = registry.serialize(Point(3, 4))
    assert s.name == "custom"
    assert registry.deserialize(s, trusted=False) == Point(3, 4)


def test_registered_user_type_nested_in_containers_uses_its_functions(
    registry: SerializerRegistry,
) -> None:
    calls: list[Point] = []

    def reduce(p: Point) -> tuple[int, int]:
        calls.append(p)
        return (p.x, p.y)

    registry.register_serializer(Point, serializer=reduce, deserializer=lambda t: Point(*t))
    value = {"points": [Point(1, 2), Point(5, 6)]}
    out = registry.deserialize(registry.serialize(value), trusted=True)
    assert out == value and len(calls) == 2


def test_receiver_without_the_registration_names_the_missing_type(
    registry: SerializerRegistry,
) -> None:
    s = registry.serialize(Point(1, 1))
    with pytest.raises(SerializationError, match=r"serializer_helpers:Point.*register_serializer"):
        SerializerRegistry().deserialize(s, trusted=True)


def test_deregistered_type_goes_back_to_pickle(registry: SerializerRegistry) -> None:
    registry.deregister_serializer(Point)
    assert registry.serialize(Point(1, 2)).name == "pickle5"
    with pytest.raises(KeyError, match="Point"):
        registry.deregister_serializer(Point)


def test_failing_user_serializer_is_reported_with_the_type(registry: SerializerRegistry) -> None:
    class Bad:
        pass

    def explode(_: Bad) -> object:
        raise RuntimeError("no way")

    registry.register_serializer(Bad, serializer=explode, deserializer=lambda x: Bad())
    with pytest.raises(SerializationError, match=r"cannot serialize .*Bad: its registered serializer raised RuntimeError: no way"):
        registry.serialize(Bad())


class _Reversed(Serializer):
    """A user serializer for bytes: stores them reversed, to prove it was used."""

    name = "reversed"

    def handles_type(self, tp: type) -> bool:
        return tp is bytes

    def can_serialize(self, value: object) -> bool:
        return type(value) is bytes

    def serialize(self, value: object) -> tuple[bytes, list[Buffer]]:
        assert isinstance(value, bytes)
        return b"", [value[::-1]]

    def deserialize(self, header: bytes, buffers: Sequence[memoryview]) -> object:
        return bytes(buffers[0])[::-1]


def test_user_serializer_is_picked_for_its_types_and_usable_by_name(
    registry: SerializerRegistry,
) -> None:
    registry.register(_Reversed())
    s = registry.serialize(b"abc")
    assert s.name == "reversed" and bytes(s.buffers[0]) == b"cba"
    assert registry.deserialize(s, trusted=False) == b"abc"
    assert registry.serialize("text").name == "msgspec"
    with pytest.raises(ValueError, match="already registered"):
        registry.register(_Reversed())
    registry.register(_Reversed(), replace=True)
    with pytest.raises(ValueError, match="cannot be replaced"):
        registry.register(zs.Pickle5Serializer(), replace=True)


def test_default_serializer_applies_to_every_call_until_reset(
    registry: SerializerRegistry,
) -> None:
    registry.set_default("pickle5")
    assert registry.serialize({"a": 1}).name == "pickle5"
    assert registry.serialize({"a": 1}, serializer="msgspec").name == "msgspec"
    registry.set_default(None)
    assert registry.serialize({"a": 1}).name == "msgspec"
    with pytest.raises(SerializationError, match="did you mean 'numpy'"):
        registry.set_default("numpi")


def test_explicit_serializer_that_cannot_take_the_value_says_so(
    registry: SerializerRegistry,
) -> None:
    with pytest.raises(SerializationError, match=r"cannot serialize dict with serializer 'numpy'"):
        registry.serialize({"a": 1}, serializer="numpy")
    with pytest.raises(SerializationError, match=r"holds a object, which is not plain data"):
        registry.serialize([object()], serializer="msgspec")


def test_picking_is_one_lookup_cached_per_type(registry: SerializerRegistry) -> None:
    assert registry.pick({"a": 1}).name == "msgspec"
    assert registry.pick(np.ones(1)).name == "numpy"
    assert registry.pick(object()).name == "pickle5"
    assert set(registry._by_type) >= {dict, np.ndarray, object}


# -- error messages for values pickle rejects ------------------------------------------


class Logger:
    def __init__(self) -> None:
        self.name = "train"
        self.lock = threading.Lock()


class Trainer:
    def __init__(self) -> None:
        self.lr = 0.1
        self.logger = Logger()


def test_unpicklable_attribute_is_named_by_its_path(registry: SerializerRegistry) -> None:
    with pytest.raises(SerializationError) as info:
        registry.serialize(Trainer())
    assert str(info.value).startswith(
        "cannot serialize Trainer: attribute 'self.logger.lock' is a _thread.lock, which "
        "cannot be pickled"
    )


def test_unpicklable_closure_variable_is_named(registry: SerializerRegistry) -> None:
    lock = threading.RLock()

    def step() -> object:
        return lock

    with pytest.raises(SerializationError, match=r"closure variable 'value\['fn'\].<closure lock>' is a _thread.RLock"):
        registry.serialize({"fn": step})


def test_unpicklable_item_inside_containers_is_named(registry: SerializerRegistry) -> None:
    value = {"jobs": [1, {"t": Trainer()}]}
    with pytest.raises(SerializationError, match=r"value\['jobs'\]\[1\]\['t'\].logger.lock"):
        registry.serialize(value)


# -- exceptions ---------------------------------------------------------------------------


class AppError(Exception):
    """An exception whose __init__ does not take its args back (plain pickle fails on it)."""

    def __init__(self, code: int, detail: str) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code


def _fail_deep() -> None:
    try:
        {}["missing"]
    except KeyError as exc:
        raise AppError(7, "lookup failed") from exc


def test_exceptions_round_trip_with_traceback_text_and_cause(
    registry: SerializerRegistry,
) -> None:
    try:
        _fail_deep()
    except AppError as exc:
        caught = exc
    s = registry.serialize(caught)
    assert s.name == "pickle5"
    out = registry.deserialize(s, trusted=True)
    assert type(out) is AppError and out.args == caught.args and out.code == 7
    text = remote_traceback(out)
    assert text is not None and "_fail_deep" in text and "AppError: 7: lookup failed" in text
    assert type(out.__cause__) is KeyError and "missing" in (remote_traceback(out.__cause__) or "")
    assert remote_traceback(registry.deserialize(registry.serialize(out), trusted=True)) == text


def test_exception_inside_a_result_keeps_its_traceback(registry: SerializerRegistry) -> None:
    try:
        raise ValueError("bad input")
    except ValueError as exc:
        result = {"ok": False, "error": exc}
    out = registry.deserialize(registry.serialize(result), trusted=True)
    assert isinstance(out["error"], ValueError)
    assert "raise ValueError" in (remote_traceback(out["error"]) or "")


# -- module-level API ------------------------------------------------------------------


def test_module_level_register_serializer_round_trips_and_cleans_up() -> None:
    class Celsius:
        def __init__(self, deg: float) -> None:
            self.deg = deg

    zs.register_serializer(Celsius, serializer=lambda c: c.deg, deserializer=Celsius)
    try:
        s = zs.serialize(Celsius(21.5))
        assert isinstance(s, Serialized) and s.name == "custom"
        assert zs.deserialize(s, trusted=False).deg == 21.5
    finally:
        zs.deregister_serializer(Celsius)
    assert zs.serialize(Celsius(1.0)).name == "pickle5"
    assert "pickle5" in zs.serializer_names()
    assert zs.get_serializer("numpy").name == "numpy"


def test_register_serializer_rejects_bad_arguments(registry: SerializerRegistry) -> None:
    with pytest.raises(TypeError, match="takes a class"):
        registry.register_serializer("Point", serializer=str, deserializer=str)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="callable"):
        registry.register_serializer(Point, serializer=None, deserializer=str)  # type: ignore[arg-type]


def test_deserialize_rejects_things_that_are_not_serialized_values(
    registry: SerializerRegistry,
) -> None:
    with pytest.raises(SerializationError, match="triple"):
        registry.deserialize(42, trusted=True)  # type: ignore[arg-type]
    with pytest.raises(SerializationError, match="name must be a str"):
        registry.deserialize((1, b"", []), trusted=True)  # type: ignore[arg-type]
