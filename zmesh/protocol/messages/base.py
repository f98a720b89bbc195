"""The base class of every wire message and the tag ranges each message module owns.

A message is a msgspec Struct encoded as a msgpack array whose first element is
its int tag: `class Ping(Message, tag=1): seq: int` travels as `[1, seq]`. The field
order IS the wire format, so read `zmesh/protocol/SCHEMA.md` before changing a field.
"""

from __future__ import annotations

from typing import Final

import msgspec

__all__ = ["Message", "TAG_RANGES", "RESERVED_TAGS", "tag_of", "module_range"]


class Message(msgspec.Struct, array_like=True, gc=False):
    """Base of every control message; subclass with an explicit tag: `class X(Message, tag=21)`.

    array_like: encoded as `[tag, field1, field2, ...]` (no field names on the wire).
    Not frozen (mypy would then demand `frozen=True` on every subclass), but treat a
    message as immutable once built: pack() may hand its buffers to zmq without copying.
    gc=False: messages are not tracked by the cycle collector (faster), so a message must
    never reference itself, directly or through a list it holds.
    Every field is always sent (msgspec does not omit defaults from arrays); a decoder
    fills trailing fields that an older peer did not send from their defaults.
    """


# Which tags each module in zmesh.protocol.messages may use. A module not listed here
# cannot define messages: add its range here first (and to SCHEMA.md).
TAG_RANGES: Final[dict[str, range]] = {
    # 1-19 is the protocol's own block, split so the two modules cannot collide.
    "common": range(1, 10),
    "handshake": range(10, 20),
    "runtime": range(20, 80),
    "membership": range(80, 100),
    "control": range(100, 120),
    "placement": range(120, 140),
    "transfer": range(140, 160),
    "ops": range(200, 220),
}

# Tags from 220 up (and 160-199, in no module's range) are free for future modules.
RESERVED_TAGS: Final[range] = range(220, 2**31)


def tag_of(cls: type[Message]) -> int | None:
    """The int tag of a message class, or None for an untagged (abstract) class."""
    tag = cls.__struct_config__.tag
    if tag is None or isinstance(tag, int):
        return tag
    raise TypeError(f"{cls.__qualname__} has tag {tag!r}; message tags must be ints")


def module_range(module_name: str) -> range:
    """The tag range of a messages module, by its last dotted name part ('runtime')."""
    short = module_name.rsplit(".", 1)[-1]
    try:
        return TAG_RANGES[short]
    except KeyError:
        known = ", ".join(sorted(TAG_RANGES))
        raise LookupError(
            f"messages module {module_name!r} has no tag range; known modules: {known}. "
            "Add its range to TAG_RANGES in zmesh/protocol/messages/base.py and SCHEMA.md"
        ) from None
