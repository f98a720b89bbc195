"""Hostile input: whatever bytes arrive, decode/unpack raise ProtocolError and nothing else."""

from __future__ import annotations

import logging
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from protocol_strategies import message_strategy

from zmesh.errors import ProtocolError
from zmesh.protocol.codec import decode, encode, safe_unpack, unpack
from zmesh.protocol.limits import Limits
from zmesh.protocol.messages import ALL_MESSAGES, BY_TAG
from zmesh.protocol.messages.base import Message

FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Values of every msgpack type, to put where a field of another type belongs.
OTHER_TYPED_VALUES: list[Any] = [
    0,
    -1,
    2**64 - 1,
    1.5,
    "text",
    b"bytes",
    None,
    True,
    [1, "a"],
    {"k": 1},
    {1: b""},
    msgspec.msgpack.Ext(5, b"x"),
]


def decodes_or_protocol_error(frame: bytes) -> None:
    """The property: a Message comes back or ProtocolError is raised; nothing else."""
    try:
        msg = decode(frame)
    except ProtocolError as exc:
        assert str(exc)
    else:
        assert isinstance(msg, Message)
        assert type(msg) in ALL_MESSAGES


@st.composite
def valid_frames(draw: st.DrawFn) -> bytes:
    cls = draw(st.sampled_from(ALL_MESSAGES))
    return encode(draw(message_strategy(cls)))


@FUZZ
@given(st.binary(max_size=256))
def test_random_bytes_never_raise_anything_but_protocol_error(frame: bytes) -> None:
    decodes_or_protocol_error(frame)


@FUZZ
@given(st.binary(max_size=64).map(lambda b: b"\x9f" + b))
def test_random_bytes_that_open_an_array_never_raise_anything_but_protocol_error(
    frame: bytes,
) -> None:
    decodes_or_protocol_error(frame)


@FUZZ
@given(valid_frames(), st.data())
def test_bit_flips_never_raise_anything_but_protocol_error(
    frame: bytes, data: st.DataObject
) -> None:
    mutated = bytearray(frame)
    for _ in range(data.draw(st.integers(1, 4))):
        bit = data.draw(st.integers(0, len(mutated) * 8 - 1))
        mutated[bit // 8] ^= 1 << (bit % 8)
    decodes_or_protocol_error(bytes(mutated))


@FUZZ
@given(valid_frames(), st.data())
def test_truncations_are_always_protocol_errors(frame: bytes, data: st.DataObject) -> None:
    cut = data.draw(st.integers(0, len(frame) - 1))
    with pytest.raises(ProtocolError):
        decode(frame[:cut])


@FUZZ
@given(valid_frames(), st.binary(min_size=1, max_size=32))
def test_bytes_appended_after_a_message_are_always_protocol_errors(
    frame: bytes, extra: bytes
) -> None:
    with pytest.raises(ProtocolError):
        decode(frame + extra)


@FUZZ
@given(valid_frames(), st.lists(st.sampled_from(OTHER_TYPED_VALUES), min_size=1, max_size=3))
def test_fields_appended_inside_the_array_decode_or_fail_cleanly(
    frame: bytes, extra: list[Any]
) -> None:
    fields = msgspec.msgpack.decode(frame)
    decodes_or_protocol_error(msgspec.msgpack.encode([*fields, *extra]))


@FUZZ
@given(valid_frames(), st.integers(-(2**63), 2**64 - 1))
def test_any_tag_decodes_to_its_own_class_or_fails_cleanly(frame: bytes, tag: int) -> None:
    fields = msgspec.msgpack.decode(frame)
    try:
        msg = decode(msgspec.msgpack.encode([tag, *fields[1:]]))
    except ProtocolError:
        return
    assert type(msg) is BY_TAG[tag]


@FUZZ
@given(st.integers(min_value=1, max_value=2**64 - 1).filter(lambda t: t not in BY_TAG))
def test_unknown_tags_are_named_in_the_error(tag: int) -> None:
    with pytest.raises(ProtocolError, match=f"unknown message tag {tag}"):
        decode(msgspec.msgpack.encode([tag]))


@FUZZ
@given(valid_frames(), st.data())
def test_a_field_of_another_type_decodes_or_names_the_field(
    frame: bytes, data: st.DataObject
) -> None:
    fields = msgspec.msgpack.decode(frame)
    cls = BY_TAG[fields[0]]
    if len(fields) < 2:
        return
    index = data.draw(st.integers(1, len(fields) - 1))
    fields[index] = data.draw(st.sampled_from(OTHER_TYPED_VALUES))
    try:
        decode(msgspec.msgpack.encode(fields))
    except ProtocolError as exc:
        assert str(exc).startswith(f"{cls.__name__}."), str(exc)


@FUZZ
@given(st.lists(st.binary(max_size=32) | st.builds(bytearray, st.binary(max_size=8)), max_size=6))
def test_random_frame_lists_never_raise_anything_but_protocol_error(frames: list[Any]) -> None:
    try:
        msg, buffers = unpack(
            frames, limits=Limits(max_header_bytes=24, max_frames=4, max_message_bytes=64)
        )
    except ProtocolError:
        return
    assert isinstance(msg, Message)
    assert all(a is b for a, b in zip(buffers, frames[1:]))


@settings(max_examples=50, deadline=None)
@given(st.binary(max_size=64))
def test_safe_unpack_logs_and_returns_none_for_every_bad_frame(frame: bytes) -> None:
    records: list[logging.LogRecord] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    log = logging.getLogger("zmesh.test.fuzz")
    log.propagate = False
    handler = Collect()
    log.addHandler(handler)
    try:
        result = safe_unpack([frame], sender=b"\x01", log=log)
    finally:
        log.removeHandler(handler)
    try:
        decode(frame)
    except ProtocolError:
        assert result is None
        assert len(records) == 1
        assert "dropped malformed message from 01" in records[0].getMessage()
    else:
        assert result is not None
        assert records == []
