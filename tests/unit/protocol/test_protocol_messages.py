"""The message union: every message round-trips, and tags are unique and in range."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from protocol_strategies import message_strategy

from zmesh.errors import ProtocolError
from zmesh.protocol import codec, messages
from zmesh.protocol.messages import ALL_MESSAGES, BY_TAG, check_tags
from zmesh.protocol.messages.base import RESERVED_TAGS, TAG_RANGES, Message, module_range, tag_of

RUNTIME = "zmesh.protocol.messages.runtime"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_message_round_trips_through_encode_and_decode(data: st.DataObject) -> None:
    cls = data.draw(st.sampled_from(ALL_MESSAGES))
    msg = data.draw(message_strategy(cls))
    assert codec.decode(codec.encode(msg)) == msg


@pytest.mark.parametrize("cls", ALL_MESSAGES, ids=lambda c: c.__name__)
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_each_message_class_round_trips_as_itself_led_by_its_tag(
    cls: type[Message], data: st.DataObject
) -> None:
    msg = data.draw(message_strategy(cls))
    frame = codec.encode(msg)
    raw = msgspec.msgpack.decode(frame)
    assert isinstance(raw, list)
    assert raw[0] == tag_of(cls)
    decoded = codec.decode(frame)
    assert type(decoded) is cls
    assert decoded == msg


def test_tags_are_unique_and_inside_their_modules_range() -> None:
    tags = [tag_of(cls) for cls in ALL_MESSAGES]
    assert len(tags) == len(set(tags))
    for cls in ALL_MESSAGES:
        tag = tag_of(cls)
        assert tag is not None, cls
        assert tag in module_range(cls.__module__), cls
        assert tag not in RESERVED_TAGS, cls
        assert BY_TAG[tag] is cls


def test_tag_ranges_do_not_overlap_and_stop_below_the_reserved_block() -> None:
    seen: set[int] = set()
    for name, tags in TAG_RANGES.items():
        assert not seen & set(tags), f"{name} overlaps another module's range"
        seen |= set(tags)
        assert tags.stop <= RESERVED_TAGS.start
    assert min(seen) == 1


def test_the_protocols_own_messages_are_in_the_union() -> None:
    names = {cls.__name__ for cls in ALL_MESSAGES}
    assert {"Ping", "Pong", "ErrorReply", "Hello", "Welcome", "Refuse"} <= names


def test_duplicate_tag_is_an_error_naming_both_classes() -> None:
    class First(Message, tag=20):
        x: int

    class Second(Message, tag=20):
        y: int

    with pytest.raises(TypeError, match=r"duplicate message tag 20: .*First and .*Second"):
        check_tags({RUNTIME: [First, Second]})


def test_duplicate_tag_across_modules_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(TAG_RANGES, "overlapping", range(1, 5))
    clash = type("Clash", (Message,), {}, tag=1)
    with pytest.raises(TypeError, match=r"duplicate message tag 1: .*common.Ping and .*Clash"):
        check_tags(
            {
                "zmesh.protocol.messages.common": [BY_TAG[1]],
                "zmesh.protocol.messages.overlapping": [clash],
            }
        )


def test_subclass_that_forgets_its_tag_is_reported_as_a_duplicate() -> None:
    class Parent(Message, tag=30):
        x: int

    class Child(Parent):
        y: int = 0

    with pytest.raises(TypeError, match="inherits its parent's tag"):
        check_tags({RUNTIME: [Parent, Child]})


def test_tag_outside_the_modules_range_is_an_error() -> None:
    class Stray(Message, tag=85):
        pass

    with pytest.raises(TypeError, match=r"Stray has tag 85, outside its module's range 20-79"):
        check_tags({RUNTIME: [Stray]})


def test_reserved_tags_belong_to_no_module() -> None:
    class Future(Message, tag=160):
        pass

    for module in TAG_RANGES:
        with pytest.raises(TypeError, match="outside its module's range"):
            check_tags({f"zmesh.protocol.messages.{module}": [Future]})


def test_message_without_a_tag_is_an_error() -> None:
    class Untagged(Message):
        x: int

    with pytest.raises(TypeError, match=r"Untagged has no tag; give it an int tag from 20-79"):
        check_tags({RUNTIME: [Untagged]})


def test_untagged_shared_base_with_subclasses_is_skipped() -> None:
    class Shared(Message):
        x: int

    class Concrete(Shared, tag=40):
        pass

    assert check_tags({RUNTIME: [Shared, Concrete]}) == {40: Concrete}


def test_string_tag_is_an_error() -> None:
    class Named(Message, tag="named"):
        pass

    with pytest.raises(TypeError, match="tag 'named'; message tags must be ints"):
        check_tags({RUNTIME: [Named]})


def test_message_that_is_not_array_like_is_an_error() -> None:
    class AsDict(Message, tag=41, array_like=False):
        x: int

    with pytest.raises(TypeError, match="AsDict must stay array_like"):
        check_tags({RUNTIME: [AsDict]})


def test_message_that_forbids_unknown_fields_is_an_error() -> None:
    class Strict(Message, tag=42, forbid_unknown_fields=True):
        x: int

    with pytest.raises(TypeError, match="Strict must not forbid unknown fields"):
        check_tags({RUNTIME: [Strict]})


def test_module_without_a_tag_range_is_an_error_saying_where_to_add_one() -> None:
    class Orphan(Message, tag=1):
        pass

    with pytest.raises(TypeError, match=r"'zmesh.protocol.messages.orphans' has no tag range"):
        check_tags({"zmesh.protocol.messages.orphans": [Orphan]})


def test_a_module_dropped_into_the_package_is_picked_up_by_refresh(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = "zz_late_messages"
    (tmp_path / f"{name}.py").write_text(
        textwrap.dedent(
            """
            from zmesh.protocol.messages.base import Message

            class LateComer(Message, tag=161):
                note: str
            """
        )
    )
    monkeypatch.setitem(TAG_RANGES, name, range(160, 170))
    monkeypatch.setattr(messages, "__path__", [*messages.__path__, str(tmp_path)])
    frame = msgspec.msgpack.encode([161, "hi"])
    try:
        with pytest.raises(ProtocolError, match="unknown message tag 161"):
            codec.decode(frame)
        codec.refresh()
        late = codec.decode(frame)
        assert type(late).__name__ == "LateComer"
        assert type(late).__module__ == f"zmesh.protocol.messages.{name}"
    finally:
        monkeypatch.undo()
        sys.modules.pop(f"zmesh.protocol.messages.{name}", None)
        codec.refresh()
    with pytest.raises(ProtocolError, match="unknown message tag 161"):
        codec.decode(frame)
