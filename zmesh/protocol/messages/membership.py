"""SWIM membership messages (tags 80-99): probes, indirect probes, gossip, join, push-pull.

Every message that travels between two members carries `updates`, the piggybacked
gossip: the newest records about other members. `MemberUpdate` and `Metadata` are
nested records, not messages, so they have no tag of their own.
"""

from __future__ import annotations

import enum
from typing import Annotated

import msgspec

from zmesh.protocol.messages.base import Message

__all__ = [
    "MemberState",
    "Metadata",
    "MemberUpdate",
    "Probe",
    "ProbeAck",
    "ProbeRequest",
    "Gossip",
    "Join",
    "PushPull",
    "MEMBERSHIP_MESSAGES",
]

NonNegative = Annotated[int, msgspec.Meta(ge=0)]
Address = Annotated[str, msgspec.Meta(min_length=1, max_length=1024)]


class MemberState(enum.IntEnum):
    """A member's state; at equal incarnation a higher value overrides a lower one."""

    ALIVE = 0
    SUSPECT = 1
    DEAD = 2
    LEFT = 3


class Metadata(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """What a node advertises about itself; a higher `version` replaces a lower one."""

    version: NonNegative = 0
    resources: dict[str, float] = msgspec.field(default_factory=dict)
    labels: dict[str, str] = msgspec.field(default_factory=dict)


class MemberUpdate(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """One member's record as the sender knows it; `metadata` is None when not included."""

    address: Address
    state: MemberState
    incarnation: NonNegative
    metadata: Metadata | None = None


class Probe(Message, tag=80):
    """Are you alive? The receiver answers `ProbeAck` with the same `seq`."""

    seq: NonNegative
    updates: list[MemberUpdate] = msgspec.field(default_factory=list)


class ProbeAck(Message, tag=81):
    """Answer to `Probe` (directly, or relayed by the member a `ProbeRequest` went to)."""

    seq: NonNegative
    updates: list[MemberUpdate] = msgspec.field(default_factory=list)


class ProbeRequest(Message, tag=82):
    """Indirect probe: please probe `target` and relay its ack to me with my `seq`."""

    seq: NonNegative
    target: Address
    updates: list[MemberUpdate] = msgspec.field(default_factory=list)


class Gossip(Message, tag=83):
    """Updates pushed to a few random members between probes, so news spreads fast."""

    updates: list[MemberUpdate] = msgspec.field(default_factory=list)


class Join(Message, tag=84):
    """A new node announces itself to a seed member; the seed answers with `PushPull`."""

    member: MemberUpdate


class PushPull(Message, tag=85):
    """Anti-entropy: the sender's full view; a non-`reply` one is answered with the receiver's."""

    members: list[MemberUpdate]
    reply: bool = False


MEMBERSHIP_MESSAGES: tuple[type[Message], ...] = (
    Probe,
    ProbeAck,
    ProbeRequest,
    Gossip,
    Join,
    PushPull,
)
