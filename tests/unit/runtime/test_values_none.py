"""None, the commonest answer, is encoded once and decoded without unpacking (runtime/
values.py); every other value still goes through its serializer."""

from __future__ import annotations

import pytest

from zmesh.errors import ZmeshError
from zmesh.protocol import codec
from zmesh.protocol.messages.runtime import TaskResult, Value
from zmesh.runtime import values


def _over_the_wire(value: Value) -> Value:
    """The value as a receiver decodes it (a new object, its bytes a copy)."""
    msg = codec.decode(codec.encode(TaskResult(task_id=b"t", returns=[value])))
    assert isinstance(msg, TaskResult)
    return msg.returns[0]


def test_none_round_trips_through_the_wire() -> None:
    value, refs = values.encode(None, b"o" * 28, allocate=None, seal=None)
    assert value is values.NONE_VALUE and refs == []
    received = _over_the_wire(value)
    assert received is not values.NONE_VALUE
    assert values.decode(received, None) is None


@pytest.mark.parametrize("obj", [0, 5, "", "None", b"", [], [None], {"a": None}, False])
def test_values_that_are_not_none_decode_to_themselves(obj: object) -> None:
    value, _ = values.encode(obj, b"o" * 28, allocate=None, seal=None)
    assert values.decode(_over_the_wire(value), None) == obj


def test_an_error_value_is_never_taken_for_none() -> None:
    err = Value(data=values.NONE_VALUE.data, is_error=True)  # None's bytes, marked an error
    obj = values.decode(err, None)
    assert obj is None
    with pytest.raises(ZmeshError, match="task failed"):
        values.raise_if_error(err, obj)  # still raised as the error it is
    real = values.encode_error(ValueError("boom"))
    assert isinstance(values.decode(_over_the_wire(real), None), ValueError)
