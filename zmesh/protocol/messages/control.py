"""Control store messages (tags 100-119): client requests, replication, shard handoff, watches.

`view` fields carry the sender's membership fingerprint (`zmesh.store.control_store.view_id`):
replication and handoff messages are only acted on by a receiver in the same view, which is
what stops a message from an old membership from reviving stale data. `KvRecord`, `OpId` and
`WatchState` are nested records, not messages, so they have no tag of their own.
"""

from __future__ import annotations

import enum
from typing import Annotated

import msgspec

from zmesh.protocol.messages.base import Message

__all__ = [
    "KvStatus",
    "OpId",
    "KvRecord",
    "WatchState",
    "KvGet",
    "KvPut",
    "KvDelete",
    "KvList",
    "KvReply",
    "KvListReply",
    "Replicate",
    "ReplicateAck",
    "Handoff",
    "HandoffAck",
    "Subscribe",
    "Unsubscribe",
    "SubSnapshot",
    "Notify",
    "CONTROL_MESSAGES",
]

NonNegative = Annotated[int, msgspec.Meta(ge=0)]
Key = Annotated[str, msgspec.Meta(min_length=1, max_length=4096)]
Prefix = Annotated[str, msgspec.Meta(max_length=4096)]


class KvStatus(enum.IntEnum):
    """How a request ended. RETRY is internal: the client core resends, users never see it."""

    OK = 0
    NOT_FOUND = 1
    CAS_FAILED = 2  # expected_version did not match; `version` holds the current one
    EXISTS = 3  # put-if-absent found a live value; `version`/`value` hold it
    RETRY = 4  # not the primary, or the shard is moving: send again shortly
    TIMEOUT = 5  # only in completions: no primary answered in time


class OpId(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """Who wrote a record: lets a retried write that already landed be answered, not redone."""

    origin: str
    incarnation: NonNegative
    rid: NonNegative


class KvRecord(msgspec.Struct, array_like=True, frozen=True, gc=False, omit_defaults=True):
    """One key at one version; `value` None is a delete (a tombstone that keeps the version).

    `writer` wrote this version; `earlier` wrote the versions just before it, newest first
    (a short window), so that a resent write is recognised even after others followed it.
    """

    key: Key
    version: NonNegative
    value: bytes | None
    writer: OpId | None = None
    earlier: list[OpId] = msgspec.field(default_factory=list)


class WatchState(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """A subscription as its subscriber holds it, with the last version seen of each key."""

    sub_id: NonNegative
    target: Prefix
    prefix: bool
    since: dict[str, int] = msgspec.field(default_factory=dict)


class KvGet(Message, tag=100):
    """Read `key` at its primary; answered by `KvReply`."""

    rid: NonNegative
    key: Key


class KvPut(Message, tag=101):
    """Write `key` at its primary, optionally only at `expected_version` or only if absent."""

    rid: NonNegative
    key: Key
    value: bytes
    expected_version: NonNegative | None = None
    if_absent: bool = False
    incarnation: NonNegative = 0


class KvDelete(Message, tag=102):
    """Delete `key` at its primary (a tombstone keeps its version), optionally only at a version."""

    rid: NonNegative
    key: Key
    expected_version: NonNegative | None = None
    incarnation: NonNegative = 0


class KvList(Message, tag=103):
    """Ask one member for the live keys under `prefix` that it is primary of in `view`."""

    rid: NonNegative
    prefix: Prefix
    view: NonNegative


class KvReply(Message, tag=104):
    """The answer to KvGet, KvPut and KvDelete."""

    rid: NonNegative
    status: KvStatus
    version: NonNegative = 0
    value: bytes | None = None


class KvListReply(Message, tag=105):
    """One member's share of a prefix listing; RETRY when its view differs or it is not ready."""

    rid: NonNegative
    view: NonNegative
    status: KvStatus
    records: list[KvRecord] = msgspec.field(default_factory=list)


class Replicate(Message, tag=106):
    """Primary to replica: store this record (if still in `view`) and ack it."""

    view: NonNegative
    record: KvRecord


class ReplicateAck(Message, tag=107):
    """Replica to primary: `key` at `version` is stored."""

    view: NonNegative
    key: Key
    version: NonNegative


class Handoff(Message, tag=108):
    """Part `part` of `parts` of what the sender holds that the receiver owns in `view`.

    Carries the records of the receiver's shards and the sender's own subscriptions on them;
    the receiver serves as primary only once it has every part from every member of `view`.
    `echo`: sent in answer to a handoff of `view` the receiver did not wait for (the sender
    began the view again while the receiver stayed in it: paused through a view change);
    an echo is never answered with one.
    """

    view: NonNegative
    part: NonNegative
    parts: NonNegative
    records: list[KvRecord] = msgspec.field(default_factory=list)
    watches: list[WatchState] = msgspec.field(default_factory=list)
    echo: bool = False


class HandoffAck(Message, tag=109):
    """The receiver merged part `part` of the sender's handoff for `view`."""

    view: NonNegative
    part: NonNegative


class Subscribe(Message, tag=110):
    """Register a watch at a primary in `view`; answered by `SubSnapshot`."""

    view: NonNegative
    watch: WatchState


class Unsubscribe(Message, tag=111):
    """Drop the sender's watch `sub_id`."""

    sub_id: NonNegative


class SubSnapshot(Message, tag=112):
    """A primary's records under a watch, newer than its `since` (tombstones included)."""

    view: NonNegative
    sub_id: NonNegative
    records: list[KvRecord] = msgspec.field(default_factory=list)


class Notify(Message, tag=113):
    """A committed change of a watched key, sent by its primary to the subscriber."""

    sub_id: NonNegative
    record: KvRecord


CONTROL_MESSAGES: tuple[type[Message], ...] = (
    KvGet,
    KvPut,
    KvDelete,
    KvList,
    KvReply,
    KvListReply,
    Replicate,
    ReplicateAck,
    Handoff,
    HandoffAck,
    Subscribe,
    Unsubscribe,
    SubSnapshot,
    Notify,
)
