"""Messages any two zmesh processes exchange, whatever their role (tags 1-9)."""

from __future__ import annotations

from zmesh.protocol.messages.base import Message

__all__ = ["Ping", "Pong", "ErrorReply"]


class Ping(Message, tag=1):
    """Liveness probe; the receiver answers `Pong` with the same `seq`."""

    seq: int


class Pong(Message, tag=2):
    """Answer to `Ping`, echoing its `seq` so the prober can match it."""

    seq: int


class ErrorReply(Message, tag=3):
    """A request failed: `kind` is the zmesh exception class name, `message` says why."""

    request_id: int
    kind: str
    message: str
