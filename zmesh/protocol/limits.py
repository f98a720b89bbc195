"""Size limits on wire messages, checked on every pack and unpack.

A peer can make a receiver allocate up to these sizes, so they are deliberately finite.
`MAX_MESSAGE_BYTES` can be raised per process (`set_default_limits`) or with the
`ZMESH_MAX_MESSAGE_BYTES` environment variable, read once at import.
"""

from __future__ import annotations

import os
from typing import Final

import msgspec

__all__ = [
    "MAX_HEADER_BYTES",
    "MAX_FRAMES",
    "MAX_MESSAGE_BYTES",
    "Limits",
    "default_limits",
    "set_default_limits",
]

MAX_HEADER_BYTES: Final[int] = 1 << 20
"""The msgpack header frame of one message: 1 MiB. Control messages are far smaller."""

MAX_FRAMES: Final[int] = 4096
"""Frames in one message, header included (out-of-band buffers of one value)."""

MAX_MESSAGE_BYTES: Final[int] = 256 << 20
"""All frames of one message together: 256 MiB. Bigger objects go through the object store."""

_ENV_MAX_MESSAGE_BYTES: Final[str] = "ZMESH_MAX_MESSAGE_BYTES"


class Limits(msgspec.Struct, frozen=True):
    """The limits one pack or unpack enforces; every value must be a positive int."""

    max_header_bytes: int = MAX_HEADER_BYTES
    max_frames: int = MAX_FRAMES
    max_message_bytes: int = MAX_MESSAGE_BYTES

    def __post_init__(self) -> None:
        for name in ("max_header_bytes", "max_frames", "max_message_bytes"):
            value = getattr(self, name)
            if type(value) is not int or value <= 0:
                raise ValueError(f"Limits.{name} must be a positive int, got {value!r}")
        if self.max_header_bytes > self.max_message_bytes:
            raise ValueError(
                f"Limits.max_header_bytes ({self.max_header_bytes}) exceeds "
                f"max_message_bytes ({self.max_message_bytes})"
            )


def _limits_from_env() -> Limits:
    raw = os.environ.get(_ENV_MAX_MESSAGE_BYTES)
    if raw is None or not raw.strip():
        return Limits()
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(
            f"{_ENV_MAX_MESSAGE_BYTES} must be an int number of bytes, got {raw!r}"
        ) from None
    return Limits(max_message_bytes=value)


_default: Limits = _limits_from_env()


def default_limits() -> Limits:
    """The limits pack and unpack use when a call passes none."""
    return _default


def set_default_limits(limits: Limits) -> None:
    """Replace this process's default limits (e.g. from `init(max_message_bytes=...)`)."""
    global _default
    if not isinstance(limits, Limits):
        raise TypeError(f"expected a Limits, got {type(limits).__name__}")
    _default = limits
