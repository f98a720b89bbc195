"""Coalescing small messages to one peer into one ZeroMQ frame, and taking such frames apart.

Over CURVE, libzmq encrypts every frame on its own (one crypto_box plus allocations and
copies in its I/O thread), so a stream of 100 B messages pays that per message. An endpoint
that coalesces (`ZmqEndpoint(coalesce=True)`; the runtime's event loop turns it on) sends the
first small message to a peer at once, and holds the small messages that follow it to the
same peer until its owner next receives (unless it is handing out a received batch, for
up to `TURN_RECVS` messages), flushes, disconnects or closes, or the batch reaches `MAX_BATCH`
messages or `MAX_BATCH_BYTES` bytes; a large or multi-frame-large message flushes the
peer's batch before it goes, so order per peer is kept exactly. A lone message never waits.
A due batch that meets the peer's full send queue is held back until the queue has room,
not dropped (`zmq_coalesce`).

On the wire a message whose first frame is empty is an envelope (a runtime message never
starts with an empty frame: codec frames do not, and the sender escapes any that does):

- ``[b"", payload]`` with a non-empty payload: a batch (format below);
- ``[b"", b"", *frames]``: one message `frames` whose own first frame is empty (escaped).

Anything else with an empty first frame is malformed and dropped, like a malformed batch.

Batch payload: a version byte (`VERSION`), a little-endian u32 frame count ``n``, then ``n``
u32 frame lengths, each with bit 31 set when the next frame belongs to the same message,
then the frames' bytes back to back. Every length must fit exactly, the last frame must end
its message, no message may start with an empty frame (no nesting), and a batch holds at
most `MAX_FRAMES` frames. Peers of an older wire protocol cannot meet this one at all:
`zmesh.protocol.handshake.PROTOCOL_VERSION` (2 since batches) is checked on every connection
(`zmq_peers`), so an old peer refuses a new one with a warning naming both versions before
any batch could reach it.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from .base import Buffer, frame_nbytes

__all__ = [
    "MAX_BATCH", "MAX_BATCH_BYTES", "MAX_FRAMES", "SMALL", "TURN_RECVS", "VERSION",
    "Batch", "count", "escape", "pack", "unpack", "unwrap",
]

VERSION = 1
SMALL = 4096
"""Messages smaller than this (all frames together) are coalesced; larger ones go alone."""
MAX_BATCH = 256
"""A peer's batch is sent once it holds this many messages."""
MAX_BATCH_BYTES = 64 * 1024
"""... or this many bytes (or the endpoint's max_frame_size, if smaller)."""
TURN_RECVS = 256
"""Receives of a received batch's messages a coalescing endpoint makes before it flushes."""
MAX_FRAMES = 65536
"""Frames one inbound batch may hold; more is malformed."""
_MORE = 0x80000000
_LENGTH = 0x7FFFFFFF
_HEAD = struct.Struct("<BI")
_EMPTY = b""


class Batch:
    """The small messages held for one peer: their frames, lengths (with the MORE bit),
    how many messages, and the payload's size so far."""

    __slots__ = ("frames", "lengths", "messages", "wire")

    def __init__(self) -> None:
        self.frames: list[Buffer] = []
        self.lengths: list[int] = []
        self.messages = 0
        self.wire = _HEAD.size

    def add(self, frames: Sequence[Buffer], sizes: Sequence[int]) -> None:
        """Hold one message (`frames`, of byte sizes `sizes`)."""
        self.frames.extend(frames)
        last = len(sizes) - 1
        self.lengths.extend(size | _MORE if i < last else size for i, size in enumerate(sizes))
        self.messages += 1
        self.wire += sum(sizes) + 4 * len(sizes)

    def add1(self, frame: Buffer, size: int) -> None:
        """Hold one single-frame message (the common case, without a generator)."""
        self.frames.append(frame)
        self.lengths.append(size)
        self.messages += 1
        self.wire += size + 4

    def wire_frames(self) -> list[Buffer]:
        """What goes on the wire: the lone message as itself, else the batch envelope."""
        if self.messages == 1:
            return self.frames
        return [_EMPTY, pack(self.frames, self.lengths)]


def pack(frames: Sequence[Buffer], lengths: Sequence[int]) -> bytes:
    """One batch payload of `frames`, whose `lengths` carry the MORE bit (see the module)."""
    n = len(lengths)
    return b"".join([_HEAD.pack(VERSION, n), struct.pack(f"<{n}I", *lengths), *frames])


def unpack(payload: Buffer) -> list[list[Buffer]] | None:
    """The messages of a batch payload, in order; None if it is malformed in any way."""
    data = payload if type(payload) is bytes else bytes(payload)
    size = len(data)
    if size < _HEAD.size:
        return None
    version, n = _HEAD.unpack_from(data, 0)
    if version != VERSION or not 0 < n <= MAX_FRAMES:
        return None
    start = _HEAD.size + 4 * n
    if start > size:
        return None
    lengths = struct.unpack_from(f"<{n}I", data, _HEAD.size)
    messages: list[list[Buffer]] = []
    message: list[Buffer] = []
    offset = start
    for word in lengths:
        length = word & _LENGTH
        end = offset + length
        if end > size or (not message and not length):
            return None  # past the end, or a message starting with an empty frame (nested)
        message.append(data[offset:end])
        offset = end
        if not word & _MORE:
            messages.append(message)
            message = []
    if message or offset != size:
        return None  # the last frame said more follow, or bytes are left over
    return messages


def unwrap(frames: list[Buffer]) -> list[list[Buffer]] | None:
    """The messages an envelope (a message whose first frame is empty) stands for; None
    if malformed."""
    if len(frames) == 2 and frame_nbytes(frames[1]):
        return unpack(frames[1])
    if len(frames) >= 3 and not frame_nbytes(frames[1]):
        return [frames[2:]]
    return None


def count(frames: list[Buffer]) -> int:
    """How many messages `frames` stands for (a malformed envelope counts as one), for the
    counters of messages dropped or held before delivery."""
    if frame_nbytes(frames[0]):
        return 1
    messages = unwrap(frames)
    return 1 if messages is None else len(messages)


def escape(frames: Sequence[Buffer]) -> list[Buffer]:
    """The wire form of a message whose first frame is empty."""
    return [_EMPTY, _EMPTY, *frames]
