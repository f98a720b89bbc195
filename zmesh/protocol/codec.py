"""Encoding, decoding and framing of wire messages; decoding is validation.

A message on the wire is `[header, *buffers]`: the header is the msgpack encoding of a
`Message`, and large payloads ride along as extra frames that are never copied or
concatenated. Whatever bytes arrive, `decode` and `unpack` either return a valid message
or raise `ProtocolError` saying what was wrong; no other exception escapes them.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Union, cast

import msgspec

from zmesh.errors import ProtocolError
from zmesh.protocol import limits as _limits
from zmesh.protocol import messages
from zmesh.protocol.limits import Limits, default_limits
from zmesh.protocol.messages.base import Message

if TYPE_CHECKING:
    from typing_extensions import Buffer
else:  # only annotations use it at run time; zmq.Frame and any buffer-protocol object work
    Buffer = Union[bytes, bytearray, memoryview]

__all__ = ["Buffer", "encode", "decode", "decode_small", "pack", "unpack", "safe_unpack", "refresh"]

logger = logging.getLogger(__name__)

_encoder = msgspec.msgpack.Encoder()
_decoder: msgspec.msgpack.Decoder[Message] | None = None


def refresh() -> None:
    """Rebuild the decoder from the message modules now present (rescanning the package)."""
    global _decoder
    classes = messages.all_messages(rescan=True)
    _decoder = msgspec.msgpack.Decoder(cast(Any, Union)[classes])


def warm() -> None:
    """Build the decoder now (msgspec reads every message's annotations: tens of ms), e.g.
    in a fork server, so that the processes it forks do not each build their own."""
    _get_decoder()


def _get_decoder() -> msgspec.msgpack.Decoder[Message]:
    global _decoder
    if _decoder is None:
        _decoder = msgspec.msgpack.Decoder(cast(Any, Union)[messages.all_messages()])
    return _decoder


def encode(msg: Message) -> bytes:
    """The msgpack header bytes of `msg`; ProtocolError if it is not an encodable Message."""
    if not isinstance(msg, Message):
        raise ProtocolError(f"can only encode a Message, got {type(msg).__name__}")
    try:
        return _encoder.encode(msg)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ProtocolError(f"cannot encode {type(msg).__name__}: {exc}") from exc


def _buffer_size(frame: object, what: str | int) -> int:
    """Bytes in a buffer (len() counts items, not bytes, for a wide memoryview)."""
    if type(frame) is bytes or type(frame) is bytearray:
        return len(frame)
    try:
        return memoryview(frame).nbytes  # type: ignore[arg-type]
    except TypeError:
        where = f"frame {what}" if isinstance(what, int) else what
        raise ProtocolError(f"{where} is not a buffer: {type(frame).__name__}") from None


def _decode_error(frame: Buffer, exc: Exception) -> ProtocolError:
    if isinstance(exc, msgspec.ValidationError):
        return ProtocolError(_explain_validation(frame, str(exc)))
    if isinstance(exc, msgspec.DecodeError):
        return ProtocolError(f"malformed message header: {exc}")
    # RecursionError, MemoryError, a message's __post_init__, a non-contiguous buffer, ...
    return ProtocolError(f"malformed message header: {type(exc).__name__}: {exc}")


def decode(frame: Buffer, *, limits: Limits | None = None) -> Message:
    """Decode and validate one header frame; ProtocolError names what was wrong."""
    size = len(frame) if type(frame) is bytes else _buffer_size(frame, "header frame")
    max_header = (limits or default_limits()).max_header_bytes
    if size > max_header:
        raise ProtocolError(f"header frame of {size} bytes exceeds the limit of {max_header}")
    decoder = _decoder if _decoder is not None else _get_decoder()
    try:
        return decoder.decode(frame)
    except Exception as exc:
        raise _decode_error(frame, exc) from exc


def pack(
    msg: Message, buffers: Sequence[Buffer] = (), *, limits: Limits | None = None
) -> list[Buffer]:
    """The frames of `msg` with `buffers` after its header; the buffers are not copied.

    ProtocolError if the message breaks the limits, so that the sender learns it first.
    """
    header = encode(msg)
    lim = limits or default_limits()
    if len(header) > lim.max_header_bytes:
        raise ProtocolError(
            f"{type(msg).__name__} header of {len(header)} bytes exceeds the limit of "
            f"{lim.max_header_bytes}; send large payloads as buffers"
        )
    if not buffers:
        return [header]
    frames: list[Buffer] = [header, *buffers]
    _check_buffers(frames, lim, len(header), type(msg).__name__)
    return frames


def _check_buffers(frames: Sequence[Buffer], lim: Limits, total: int, name: str | None) -> None:
    """Check the frame count and total size; `total` starts as the header's size."""
    if len(frames) > lim.max_frames:
        what = f"{name} message" if name else "message"
        raise ProtocolError(
            f"{what} has {len(frames)} frames, more than the limit of {lim.max_frames}"
        )
    for i in range(1, len(frames)):
        frame = frames[i]
        total += len(frame) if type(frame) is bytes else _buffer_size(frame, i)
    if total > lim.max_message_bytes:
        what = f"{name} message" if name else "message"
        raise ProtocolError(f"{what} of {total} bytes exceeds the limit of {lim.max_message_bytes}")


def unpack(
    frames: Sequence[Buffer], *, limits: Limits | None = None
) -> tuple[Message, list[Buffer]]:
    """Split received frames into the decoded message and its buffers (the same objects).

    ProtocolError for: no frames, too many frames, an oversized header or message, or a
    header that does not decode to a valid message.
    """
    lim = limits or default_limits()
    try:
        count = len(frames)
        header = frames[0]
    except IndexError:
        raise ProtocolError("empty message: no header frame") from None
    except (TypeError, KeyError):
        raise ProtocolError(f"frames must be a sequence, got {type(frames).__name__}") from None
    size = len(header) if type(header) is bytes else _buffer_size(header, "header frame")
    if size > lim.max_header_bytes:
        raise ProtocolError(
            f"header frame of {size} bytes exceeds the limit of {lim.max_header_bytes}"
        )
    if count > 1:
        _check_buffers(frames, lim, size, None)
        buffers = list(frames[1:])
    else:
        buffers = []
    decoder = _decoder if _decoder is not None else _get_decoder()
    try:
        return decoder.decode(header), buffers
    except Exception as exc:
        raise _decode_error(header, exc) from exc


def decode_small(frame: Buffer) -> Message | None:
    """The message of a one-frame message (a header with no buffers: most messages) when it
    is a bytes frame within the header limit that decodes cleanly; None otherwise, and the
    caller then takes `safe_unpack`'s way, which says why it is refused. `unpack` less its
    checks of buffers, for receive loops (one call instead of three per message)."""
    # (`limits._default` is what `default_limits()` returns: read here without the call)
    if type(frame) is not bytes or len(frame) > _limits._default.max_header_bytes:
        return None
    decoder = _decoder if _decoder is not None else _get_decoder()
    try:
        return decoder.decode(frame)
    except Exception:
        return None


def safe_unpack(
    frames: Sequence[Buffer],
    *,
    sender: object = None,
    log: logging.Logger = logger,
    limits: Limits | None = None,
    warnings: DropWarnings | None = None,
) -> tuple[Message, list[Buffer]] | None:
    """`unpack` for receive loops: a malformed message is logged with its sender and dropped
    (through `warnings`, rate-limited, where given).

    Returns None instead of raising, so that one bad peer never kills a process.
    """
    try:
        return unpack(frames, limits=limits)
    except ProtocolError as exc:
        if warnings is not None:
            warnings.dropped(sender, exc)
        else:
            log.warning("dropped malformed message from %s: %s", _describe_sender(sender), exc)
        return None


class DropWarnings:
    """Warns about dropped messages at most `burst` times per `period_s` seconds, so a peer
    sending garbage cannot flood the log; the next warning says how many went unlogged."""

    def __init__(self, log: logging.Logger, burst: int = 10, period_s: float = 10.0) -> None:
        self.log = log
        self.burst = burst
        self.period_s = period_s
        self._since = -period_s
        self._count = 0
        self.suppressed = 0

    def dropped(self, sender: object, exc: ProtocolError) -> None:
        self.warn("dropped malformed message from %s: %s", _describe_sender(sender), exc)

    def warn(self, fmt: str, *args: object, exc_info: bool = False) -> None:
        """Log one warning about a dropped or failed message, unless over the budget."""
        now = time.monotonic()
        if now - self._since >= self.period_s:
            self._since, self._count = now, 0
        if self._count >= self.burst:
            self.suppressed += 1
            return
        self._count += 1
        more, self.suppressed = self.suppressed, 0
        tail = f" ({more} more dropped unlogged before this)" if more else ""
        self.log.warning(fmt + "%s", *args, tail, exc_info=exc_info)


def _describe_sender(sender: object) -> str:
    if sender is None:
        return "unknown sender"
    if isinstance(sender, (bytes, bytearray, memoryview)):
        return bytes(sender)[:64].hex() or "empty identity"
    return repr(sender)[:200]


# msgspec reports e.g. "Expected `int`, got `str` - at `$[1]`"; in array_like messages the
# index is a field position, which we turn back into "Hello.protocol_version".
_AT_PATH = re.compile(
    r"^(?P<what>.*?) - at (?P<key>`key` in )?`\$\[(?P<index>\d+)\](?P<rest>[^`]*)`$", re.S
)
_TOO_SHORT = re.compile(r"^Expected `array` of at least length (?P<need>\d+), got (?P<got>\d+)$")


def _explain_validation(frame: Buffer, text: str) -> str:
    cls = _class_of(frame)
    name = cls.__name__ if cls is not None else "message"
    short = _TOO_SHORT.match(text)
    if short:
        got = int(short["got"])
        if got == 0:
            return "empty message array: expected [tag, fields...]"
        if cls is not None:
            fields = cls.__struct_fields__[got - 1 : int(short["need"]) - 1]
            return f"{name}: missing required field(s) {', '.join(fields)}"
        return f"message array too short: {_plain(text)}"
    at = _AT_PATH.match(text)
    if at is None:
        return f"not a message [tag, fields...]: {_plain(text)}"
    index = int(at["index"])
    what = _plain(at["what"])
    if index == 0:
        if what.startswith("invalid value "):
            return f"unknown message tag {what[len('invalid value ') :]}"
        return f"message tag: {what}"
    fields = cls.__struct_fields__ if cls is not None else ()
    field = fields[index - 1] if index - 1 < len(fields) else f"[{index}]"
    key = " key" if at["key"] else ""
    return f"{name}.{field}{at['rest']}{key}: {what}"


def _plain(text: str) -> str:
    text = text.replace("`", "")
    return text[:1].lower() + text[1:]


def _class_of(frame: Buffer) -> type[Message] | None:
    """The message class named by a header's tag, read by hand (the header may be invalid)."""
    try:
        data = memoryview(frame).cast("B")
        pos = _skip_array_header(data)
        tag = _read_uint(data, pos)
    except (TypeError, ValueError, IndexError):
        return None
    return messages.BY_TAG.get(tag) if tag is not None else None


def _skip_array_header(data: memoryview) -> int:
    first = data[0]
    if 0x90 <= first <= 0x9F:
        return 1
    if first == 0xDC:
        return 3
    if first == 0xDD:
        return 5
    raise ValueError("not an array")


def _read_uint(data: memoryview, pos: int) -> int | None:
    first = data[pos]
    if first <= 0x7F:
        return first
    widths = {0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8}
    width = widths.get(first)
    if width is None:
        return None
    return int.from_bytes(data[pos + 1 : pos + 1 + width], "big")
