"""zmesh's wire protocol: messages as one msgspec tagged union, framing, limits, handshake.

Decoding is validation: `decode`/`unpack` return a well-formed message or raise
`zmesh.errors.ProtocolError`; receive loops use `safe_unpack` to log and drop bad frames.
Schema evolution rules: `zmesh/protocol/SCHEMA.md`.
"""

from __future__ import annotations

from zmesh.protocol.codec import Buffer, decode, encode, pack, refresh, safe_unpack, unpack
from zmesh.protocol.handshake import (
    PROTOCOL_VERSION,
    ROLES,
    HandshakeState,
    Peer,
    check_hello,
    expect_welcome,
    make_hello,
)
from zmesh.protocol.limits import (
    MAX_FRAMES,
    MAX_HEADER_BYTES,
    MAX_MESSAGE_BYTES,
    Limits,
    default_limits,
    set_default_limits,
)
from zmesh.protocol.messages import ALL_MESSAGES, all_messages
from zmesh.protocol.messages.base import Message
from zmesh.protocol.messages.common import ErrorReply, Ping, Pong
from zmesh.protocol.messages.handshake import Hello, Refuse, Welcome

__all__ = [
    "ALL_MESSAGES",
    "Buffer",
    "ErrorReply",
    "HandshakeState",
    "Hello",
    "Limits",
    "MAX_FRAMES",
    "MAX_HEADER_BYTES",
    "MAX_MESSAGE_BYTES",
    "Message",
    "PROTOCOL_VERSION",
    "Peer",
    "Ping",
    "Pong",
    "ROLES",
    "Refuse",
    "Welcome",
    "all_messages",
    "check_hello",
    "decode",
    "default_limits",
    "encode",
    "expect_welcome",
    "make_hello",
    "pack",
    "refresh",
    "safe_unpack",
    "set_default_limits",
    "unpack",
]
