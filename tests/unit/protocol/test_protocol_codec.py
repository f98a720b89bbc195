"""Encoding, decoding and framing: clear ProtocolErrors, limits, zero-copy buffers."""

from __future__ import annotations

import logging

import msgspec
import pytest

from zmesh.errors import ProtocolError
from zmesh.protocol import codec, messages
from zmesh.protocol import limits as limits_mod
from zmesh.protocol.codec import Buffer, decode, encode, pack, safe_unpack, unpack
from zmesh.protocol.limits import Limits, default_limits, set_default_limits
from zmesh.protocol.messages.base import Message
from zmesh.protocol.messages.common import ErrorReply, Ping, Pong
from zmesh.protocol.messages.handshake import Hello

raw = msgspec.msgpack.encode


class Inner(msgspec.Struct, array_like=True):
    labels: dict[str, int]


class Outer(Message, tag=7):
    """Only for explaining nested errors; never part of the real union."""

    items: list[Inner]


def test_small_message_encodes_as_tag_then_fields() -> None:
    assert encode(Ping(seq=7)) == raw([1, 7])
    assert decode(raw([2, 7])) == Pong(seq=7)


def test_encode_refuses_a_value_that_is_not_a_message() -> None:
    with pytest.raises(ProtocolError, match="can only encode a Message, got dict"):
        encode({"seq": 1})  # type: ignore[arg-type]


def test_encode_names_the_message_whose_field_cannot_be_encoded() -> None:
    with pytest.raises(ProtocolError, match="cannot encode Ping"):
        encode(Ping(seq=object()))  # type: ignore[arg-type]


def test_wrong_field_type_names_class_and_field() -> None:
    frame = raw([10, "1", b"", "w1", "worker"])
    with pytest.raises(ProtocolError, match=r"^Hello.protocol_version: expected int, got str$"):
        decode(frame)


def test_constraint_violation_names_class_and_field() -> None:
    with pytest.raises(ProtocolError, match=r"Hello.incarnation: expected int >= 0"):
        decode(raw([10, 1, b"", "w1", "worker", -3]))


def test_nested_field_errors_name_the_path_inside_the_field(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(messages.BY_TAG, 7, Outer)
    frame = raw([7, [[{"a": 1}], [{2: 3}]]])
    with pytest.raises(msgspec.ValidationError) as caught:
        msgspec.msgpack.decode(frame, type=Outer)
    assert codec._explain_validation(frame, str(caught.value)) == (
        "Outer.items[1][0] key: expected str, got int"
    )


def test_unknown_tag_is_named() -> None:
    with pytest.raises(ProtocolError, match=r"^unknown message tag 9999$"):
        decode(raw([9999, 1]))


def test_tag_of_the_wrong_type_is_named() -> None:
    with pytest.raises(ProtocolError, match=r"^message tag: expected int, got str$"):
        decode(raw(["Ping", 1]))


def test_missing_fields_are_named() -> None:
    with pytest.raises(
        ProtocolError, match=r"^ErrorReply: missing required field\(s\) kind, message$"
    ):
        decode(raw([3, 12]))


def test_empty_array_is_not_a_message() -> None:
    with pytest.raises(ProtocolError, match="empty message array"):
        decode(raw([]))


def test_a_non_array_header_is_not_a_message() -> None:
    with pytest.raises(ProtocolError, match="not a message .*expected array, got object"):
        decode(raw({"seq": 1}))


@pytest.mark.parametrize(
    ("frame", "reason"),
    [
        (b"", "truncated"),
        (raw([3, 1, "k", "m"])[:-1], "truncated"),
        (b"\xc1", "invalid opcode"),
        (raw([1, 1]) + b"\x00", "trailing characters"),
        (b"\xdd\xff\xff\xff\xff", "truncated"),
    ],
)
def test_malformed_msgpack_is_a_protocol_error(frame: bytes, reason: str) -> None:
    with pytest.raises(ProtocolError, match=f"malformed message header: .*{reason}"):
        decode(frame)


def test_deeply_nested_garbage_is_a_protocol_error_not_a_recursion_error() -> None:
    # ErrorReply.kind is a str; a deep array there must fail cleanly, as must deep garbage.
    for frame in (b"\x91" * 100_000, raw([3, 1])[:-1] + b"\x91" * 100_000):
        with pytest.raises(ProtocolError):
            decode(frame)


def test_fields_added_by_a_newer_peer_are_ignored() -> None:
    assert decode(raw([1, 5, "a field from the future", [1, 2]])) == Ping(seq=5)


def test_trailing_fields_an_older_peer_did_not_send_take_their_defaults() -> None:
    hello = decode(raw([10, 1, b"k", "w", "worker"]))
    assert hello == Hello(protocol_version=1, credential=b"k", sender="w", role="worker")
    assert isinstance(hello, Hello)
    assert hello.incarnation == 0


def test_decode_accepts_any_buffer() -> None:
    frame = encode(Ping(seq=3))
    assert decode(bytearray(frame)) == Ping(seq=3)
    assert decode(memoryview(frame)) == Ping(seq=3)


def test_decode_refuses_a_header_that_is_not_a_buffer() -> None:
    with pytest.raises(ProtocolError, match="header frame is not a buffer: str"):
        decode("[1, 1]")  # type: ignore[arg-type]


def test_pack_puts_buffers_after_the_header_without_copying() -> None:
    big = bytearray(b"x" * 100_000)
    view = memoryview(b"y" * 10)
    frames = pack(ErrorReply(request_id=1, kind="k", message="m"), [big, view])
    assert frames[0] == encode(ErrorReply(request_id=1, kind="k", message="m"))
    assert frames[1] is big
    assert frames[2] is view


def test_unpack_returns_the_same_buffer_objects_it_was_given() -> None:
    big = memoryview(bytearray(1_000_000))
    other = b"tail"
    msg, buffers = unpack([encode(Ping(seq=1)), big, other])
    assert msg == Ping(seq=1)
    assert buffers[0] is big
    assert buffers[1] is other


def test_pack_then_unpack_round_trips_message_and_buffers() -> None:
    buffers: list[Buffer] = [b"a", bytearray(b"bc"), memoryview(b"def")]
    msg, got = unpack(pack(Pong(seq=2), buffers))
    assert msg == Pong(seq=2)
    assert got == buffers


def test_pack_without_buffers_is_just_the_header() -> None:
    assert pack(Ping(seq=1)) == [encode(Ping(seq=1))]


def test_unpack_of_no_frames_is_an_error() -> None:
    with pytest.raises(ProtocolError, match="empty message: no header frame"):
        unpack([])


def test_unpack_names_a_frame_that_is_not_a_buffer() -> None:
    with pytest.raises(ProtocolError, match="frame 2 is not a buffer: int"):
        unpack([encode(Ping(seq=1)), b"ok", 42])  # type: ignore[list-item]


def test_unpack_refuses_something_that_is_not_a_sequence() -> None:
    with pytest.raises(ProtocolError, match="frames must be a sequence, got int"):
        unpack(5)  # type: ignore[arg-type]


def test_oversized_header_is_refused_on_both_sides() -> None:
    small = Limits(max_header_bytes=16, max_message_bytes=1000)
    msg = ErrorReply(request_id=1, kind="k", message="m" * 20)
    with pytest.raises(ProtocolError, match=r"header of \d+ bytes exceeds the limit of 16"):
        pack(msg, limits=small)
    with pytest.raises(ProtocolError, match=r"header frame of \d+ bytes exceeds the limit of 16"):
        unpack([encode(msg)], limits=small)
    with pytest.raises(ProtocolError, match="exceeds the limit of 16"):
        decode(encode(msg), limits=small)


def test_too_many_frames_are_refused_on_both_sides() -> None:
    few = Limits(max_frames=3)
    header = encode(Ping(seq=1))
    with pytest.raises(ProtocolError, match="has 4 frames, more than the limit of 3"):
        unpack([header, b"", b"", b""], limits=few)
    with pytest.raises(ProtocolError, match="Ping message has 4 frames"):
        pack(Ping(seq=1), [b"", b"", b""], limits=few)
    assert unpack([header, b"", b""], limits=few)[0] == Ping(seq=1)


def test_oversized_total_is_refused_on_both_sides() -> None:
    tight = Limits(max_header_bytes=64, max_message_bytes=100)
    header = encode(Ping(seq=1))
    with pytest.raises(ProtocolError, match=r"message of 1\d\d bytes exceeds the limit of 100"):
        unpack([header, bytes(50), memoryview(bytes(50))], limits=tight)
    with pytest.raises(ProtocolError, match="exceeds the limit of 100"):
        pack(Ping(seq=1), [bytes(100)], limits=tight)


def test_sizes_count_bytes_not_items_of_wide_memoryviews() -> None:
    wide = memoryview(bytearray(80)).cast("Q")  # 10 items, 80 bytes
    with pytest.raises(ProtocolError, match="exceeds the limit of 64"):
        unpack([encode(Ping(seq=1)), wide], limits=Limits(max_header_bytes=8, max_message_bytes=64))


def test_default_limits_apply_when_none_are_given() -> None:
    before = default_limits()
    try:
        set_default_limits(Limits(max_frames=2))
        with pytest.raises(ProtocolError, match="more than the limit of 2"):
            unpack([encode(Ping(seq=1)), b"", b""])
    finally:
        set_default_limits(before)
    assert unpack([encode(Ping(seq=1)), b"", b""])[0] == Ping(seq=1)


def test_set_default_limits_refuses_anything_but_limits() -> None:
    with pytest.raises(TypeError, match="expected a Limits, got dict"):
        set_default_limits({"max_frames": 2})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_frames": 0}, "Limits.max_frames must be a positive int, got 0"),
        ({"max_message_bytes": 1.5}, "Limits.max_message_bytes must be a positive int"),
        ({"max_header_bytes": 10, "max_message_bytes": 5}, "exceeds max_message_bytes"),
    ],
)
def test_bad_limits_are_refused_with_the_field_named(
    kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        Limits(**kwargs)  # type: ignore[arg-type]


def test_max_message_bytes_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZMESH_MAX_MESSAGE_BYTES", str(8 << 20))
    assert limits_mod._limits_from_env().max_message_bytes == 8 << 20
    monkeypatch.setenv("ZMESH_MAX_MESSAGE_BYTES", "lots")
    with pytest.raises(ValueError, match="ZMESH_MAX_MESSAGE_BYTES must be an int .*'lots'"):
        limits_mod._limits_from_env()
    monkeypatch.delenv("ZMESH_MAX_MESSAGE_BYTES")
    assert limits_mod._limits_from_env() == Limits()


def test_safe_unpack_returns_message_and_buffers_for_valid_frames() -> None:
    buf = bytearray(b"payload")
    result = safe_unpack([encode(Ping(seq=4)), buf], sender=b"peer-1")
    assert result is not None
    assert result[0] == Ping(seq=4)
    assert result[1][0] is buf


def test_safe_unpack_logs_the_sender_and_reason_then_drops_the_message(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = logging.getLogger("zmesh.test.receiver")
    with caplog.at_level(logging.WARNING, logger="zmesh.test.receiver"):
        assert safe_unpack([raw([9999])], sender=b"\x00\x8a", log=log) is None
        assert safe_unpack([], sender="tcp://10.0.0.2:5555", log=log) is None
    first, second = caplog.records
    assert first.name == "zmesh.test.receiver"
    assert "from 008a" in first.getMessage()
    assert "unknown message tag 9999" in first.getMessage()
    assert "from 'tcp://10.0.0.2:5555'" in second.getMessage()
    assert "no header frame" in second.getMessage()


def test_safe_unpack_logs_to_the_codec_logger_by_default(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="zmesh.protocol.codec"):
        assert safe_unpack([b"\xc1"]) is None
    assert "dropped malformed message from unknown sender" in caplog.text


def test_a_flood_of_malformed_messages_logs_a_bounded_number_of_warnings(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from zmesh.protocol.codec import DropWarnings

    warnings = DropWarnings(logging.getLogger("zmesh.test.flood"), burst=10, period_s=3600)
    with caplog.at_level(logging.WARNING, logger="zmesh.test.flood"):
        for _ in range(1000):
            assert safe_unpack([b"\xc1"], sender="tcp://10.0.0.3:1", warnings=warnings) is None
    assert len(caplog.records) == 10
    assert warnings.suppressed == 990
