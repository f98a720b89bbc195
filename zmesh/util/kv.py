"""The user KV: small values shared by every process of the mesh, in the control store.

Keys are strings (a flat namespace of the caller's choosing; `/` is a convention, not a
hierarchy); values are bytes. Writes are replicated like the runtime's own records, so a
value outlives the node that wrote it while a copy survives. Meant for rendezvous and
small shared settings, not bulk data (use `put` for that).
"""

from __future__ import annotations

import time

import msgspec

from zmesh.errors import GetTimeoutError
from zmesh.runtime import context

POLL_MIN_S = 0.005
POLL_MAX_S = 0.2


def _ask(what: str, key: str, value: bytes = b"") -> object:
    if not isinstance(key, str) or not key:
        raise TypeError(f"a user KV key must be a non-empty str, got {key!r}")
    if not isinstance(value, bytes | bytearray | memoryview):
        raise TypeError(f"a user KV value must be bytes, got {type(value).__name__}")
    arg = msgspec.msgpack.encode([key, bytes(value)])
    return context.current_client().query(what, arg)


def kv_get(key: str) -> bytes | None:
    """The value under `key`, or None when it has none."""
    value = _ask("kv_get", key)
    return bytes(value) if isinstance(value, bytes | bytearray) else None


def kv_put(key: str, value: bytes, *, overwrite: bool = True) -> bool:
    """Write `value` under `key`; with overwrite=False only if the key has no value.
    True when it was written."""
    return bool(_ask("kv_put" if overwrite else "kv_put_if_absent", key, value))


def kv_add(key: str, amount: int) -> int:
    """Atomically add `amount` to the decimal int under `key` (0 when it has none); the new
    value. Concurrent adders from any process all count."""
    if not isinstance(amount, int):
        raise TypeError(f"kv_add amount must be an int, got {amount!r}")
    answer = _ask("kv_add", key, str(amount).encode())
    if not isinstance(answer, int):
        raise TypeError(f"kv_add {key!r}: the node answered {answer!r}, not an int")
    return answer


def kv_compare_set(key: str, expected: bytes, desired: bytes) -> bytes:
    """Atomically set `key` to `desired` if it holds `expected` (empty `expected`: if it has
    no value); the value it holds afterwards (`desired` when the swap happened)."""
    arg = msgspec.msgpack.encode([bytes(expected), bytes(desired)])
    answer = _ask("kv_cas", key, arg)
    if not isinstance(answer, bytes | bytearray):
        raise TypeError(f"kv_compare_set {key!r}: the node answered {answer!r}, not bytes")
    return bytes(answer)


def kv_delete(key: str) -> bool:
    """Delete `key`; True when it had a value."""
    return bool(_ask("kv_delete", key))


def kv_list(prefix: str) -> list[str]:
    """The keys that start with `prefix`, sorted."""
    if not isinstance(prefix, str):
        raise TypeError(f"a user KV prefix must be a str, got {prefix!r}")
    arg = msgspec.msgpack.encode([prefix, b""])
    return sorted(str(k) for k in context.current_client().query("kv_list", arg))


def kv_wait(key: str, timeout: float | None = None) -> bytes:
    """The value under `key` once it has one; GetTimeoutError after `timeout` seconds."""
    deadline = None if timeout is None else time.monotonic() + timeout
    pause = POLL_MIN_S
    while True:
        value = kv_get(key)
        if value is not None:
            return value
        if deadline is not None and time.monotonic() >= deadline:
            raise GetTimeoutError(f"no value appeared under the user KV key {key!r} "
                                  f"within {timeout:g}s")
        left = POLL_MAX_S if deadline is None else max(0.0, deadline - time.monotonic())
        time.sleep(min(pause, left))  # the store has no watch for clients yet: poll, backing off
        pause = min(pause * 2, POLL_MAX_S)


__all__ = ["kv_add", "kv_compare_set", "kv_delete", "kv_get", "kv_list", "kv_put", "kv_wait"]
