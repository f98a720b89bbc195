"""The connection handshake: `Hello` first, answered by `Welcome` or `Refuse` (tags 10-19).

The logic that checks them lives in `zmesh.protocol.handshake`.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from zmesh.protocol.messages.base import Message

__all__ = ["Hello", "Welcome", "Refuse"]

NonNegative = Annotated[int, msgspec.Meta(ge=0)]


class Hello(Message, tag=10):
    """First message on every connection: who is speaking, and its proof of membership.

    `credential` is the cluster credential (empty where the cluster needs none);
    `incarnation` grows each time the same `sender` restarts.
    """

    protocol_version: NonNegative
    credential: bytes
    sender: str
    role: str
    incarnation: NonNegative = 0


class Welcome(Message, tag=11):
    """The handshake was accepted by node `node_id`, speaking `protocol_version`."""

    protocol_version: NonNegative
    node_id: str


class Refuse(Message, tag=12):
    """The handshake was refused; `reason` names what was expected and what came."""

    reason: str
