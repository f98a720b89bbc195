"""Control store settings, limits and argument checks, the view fingerprint, record helpers."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import msgspec

from zmesh.core.hashring import DEFAULT_VNODES
from zmesh.protocol.messages.control import KvRecord, OpId

__all__ = [
    "MAX_KEY_CHARS",
    "MAX_VALUE_BYTES",
    "WRITER_WINDOW",
    "StoreConfig",
    "view_id",
    "check_key",
    "check_prefix",
    "check_value",
    "check_version",
    "landed_at",
    "split_parts",
]

MAX_KEY_CHARS = 4096
MAX_VALUE_BYTES = 512 * 1024
"""Values ride in message headers (capped at 1 MiB); big data belongs in the object store."""

WRITER_WINDOW = 8
"""How many recent writers of a key are remembered to recognise a resent write."""


class StoreConfig(msgspec.Struct, frozen=True):
    """Tuning of one control store member; times are seconds on the caller's clock."""

    replication: int = 3
    vnodes: int = DEFAULT_VNODES
    request_timeout: float = 10.0  # a request completes with TIMEOUT after this long
    attempt_timeout: float = 0.5  # resend to the (maybe new) primary after this long
    retry_backoff: float = 0.02  # wait before resending after a RETRY answer
    resend_interval: float = 0.1  # unacknowledged replication, handoff and subscribe
    gap_timeout: float = 2.0  # deliver past a hole in a key's versions after this long
    watch_resync_interval: float = 5.0  # subscriptions re-ask their primaries what is newer
    handoff_part_bytes: int = 256 * 1024

    def __post_init__(self) -> None:
        if type(self.replication) is not int or self.replication < 1:
            raise ValueError(f"StoreConfig.replication must be an int >= 1, got {self.replication!r}")
        for name in ("request_timeout", "attempt_timeout", "retry_backoff", "resend_interval",
                     "gap_timeout", "watch_resync_interval"):
            if not getattr(self, name) > 0:
                raise ValueError(f"StoreConfig.{name} must be > 0, got {getattr(self, name)!r}")
        if self.handoff_part_bytes < 1024:
            raise ValueError(
                f"StoreConfig.handoff_part_bytes must be >= 1024, got {self.handoff_part_bytes!r}"
            )


def view_id(members: Iterable[str]) -> int:
    """The fingerprint of a member set: equal sets give equal views on every member."""
    text = "\n".join(sorted(members)).encode("utf-8")
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big")


def check_key(key: object) -> None:
    if not isinstance(key, str) or not key:
        raise ValueError(f"control store keys are non-empty strings, got {key!r}")
    if len(key) > MAX_KEY_CHARS:
        raise ValueError(f"control store key of {len(key)} chars exceeds {MAX_KEY_CHARS}: {key[:60]!r}...")


def check_value(key: str, value: object) -> bytes:
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise TypeError(f"put({key!r}): value must be bytes, got {type(value).__name__}")
    data = bytes(value)
    if len(data) > MAX_VALUE_BYTES:
        raise ValueError(
            f"put({key!r}): value of {len(data)} bytes exceeds {MAX_VALUE_BYTES}; "
            "store big data in the object store and put its reference here"
        )
    return data


def check_version(expected_version: object) -> None:
    if expected_version is not None and (
        type(expected_version) is not int or expected_version < 0
    ):
        raise ValueError(f"expected_version must be an int >= 0 or None, got {expected_version!r}")


def check_prefix(what: str, prefix: object) -> None:
    if not isinstance(prefix, str) or len(prefix) > MAX_KEY_CHARS:
        raise ValueError(f"{what}: prefix must be a str of at most {MAX_KEY_CHARS} chars, got {prefix!r}")


def landed_at(record: KvRecord | None, op: OpId) -> int:
    """The version `op` wrote, if it is one of the record's last WRITER_WINDOW writes; else 0."""
    if record is None:
        return 0
    if record.writer == op:
        return record.version
    for back, writer in enumerate(record.earlier, start=1):
        if writer == op:
            return record.version - back
    return 0


def split_parts(records: list[KvRecord], part_bytes: int) -> list[list[KvRecord]]:
    """Records in parts of about `part_bytes` (at least one part, maybe empty)."""
    parts: list[list[KvRecord]] = [[]]
    size = 0
    for record in records:
        cost = len(record.key) + len(record.value or b"") + 48
        if parts[-1] and size + cost > part_bytes:
            parts.append([])
            size = 0
        parts[-1].append(record)
        size += cost
    return parts
