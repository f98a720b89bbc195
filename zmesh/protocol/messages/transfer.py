"""Object transfer between nodes (tags 140-159): a node pulls an object chunk by chunk.

The puller asks a node that holds the object for one chunk at a time (`ChunkRequest`) and
keeps a bounded number of requests outstanding; each `Chunk` answer carries its bytes as the
message's single buffer frame, never inside the msgpack header. A transfer ends with
`PullDone` from the puller (the holder releases its pin) or `PullFailed` from the holder.
Freeing the primary copy frees the secondaries through `runtime.FreeObjects`.

A puller on the same machine as the holder may ask `LocalReadRequest` instead: the holder
pins the object and answers `LocalReadOffer` (where its bytes lie in the holder's store
file, and that file's identity), the puller verifies the file and copies the bytes itself,
then ends with `PullDone` as above (or falls back to chunks of the same transfer).
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from zmesh.protocol.messages.base import Message

__all__ = ["ChunkRequest", "Chunk", "PullFailed", "PullDone", "LocalReadRequest", "LocalReadOffer"]

NonNegative = Annotated[int, msgspec.Meta(ge=0)]
ObjectId = Annotated[bytes, msgspec.Meta(min_length=1, max_length=64)]


class ChunkRequest(Message, tag=140):
    """Puller -> holder: send `length` bytes of `object_id` starting at `offset`.

    `transfer_id` is the puller's own number for this pull; with the puller's address it
    names the holder's session (one pin held for the whole transfer).
    """

    transfer_id: NonNegative
    object_id: ObjectId
    offset: NonNegative
    length: NonNegative


class Chunk(Message, tag=141):
    """Holder -> puller: the bytes at `offset` ride as the one buffer frame after the header.

    `size` is the whole object's size at the holder, so a puller that expected another size
    fails the transfer instead of writing past its region.
    """

    transfer_id: NonNegative
    object_id: ObjectId
    offset: NonNegative
    size: NonNegative


class PullFailed(Message, tag=142):
    """Holder -> puller: this transfer cannot be served; `lost` when the holder has no copy
    (so another holder may be tried), otherwise the request itself was bad."""

    transfer_id: NonNegative
    object_id: ObjectId
    reason: str
    lost: bool = True


class PullDone(Message, tag=143):
    """Puller -> holder: the transfer is over (`ok`: the copy is complete), release its pin."""

    transfer_id: NonNegative
    object_id: ObjectId
    ok: bool = True


class LocalReadRequest(Message, tag=144):
    """Puller -> holder on the same machine: pin `object_id` for this transfer and say where
    its bytes lie (answered by `LocalReadOffer`, or `PullFailed` when not held)."""

    transfer_id: NonNegative
    object_id: ObjectId


class LocalReadOffer(Message, tag=145):
    """Holder -> puller: the object is `size` bytes at `offset` of the file `path`, whose
    identity is (`dev`, `ino`) on the machine booted as `boot_id`. The puller trusts none of
    it: it opens the file itself and checks the identity, owner and mode before reading."""

    transfer_id: NonNegative
    object_id: ObjectId
    path: Annotated[str, msgspec.Meta(max_length=4096)]
    offset: NonNegative
    size: NonNegative
    dev: NonNegative
    ino: NonNegative
    boot_id: Annotated[str, msgspec.Meta(max_length=64)]
