"""The user KV: drivers and workers read and write keys of the sharded control store.

Keys live under `user/` so that user code never touches the runtime's own records.
Requests arrive as `Query` messages (`kv_get`, `kv_put`, `kv_put_if_absent`, `kv_delete`,
`kv_list`, and the atomic `kv_add` / `kv_cas` that torch.distributed stores need) with a
msgpack `[key, value]` argument and are answered once the store has answered.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec

from zmesh.protocol.messages import runtime as m
from zmesh.store.control_requests import Completion
from zmesh.store.control_store import KvStatus

if TYPE_CHECKING:
    from zmesh.runtime.node.server import Node

USER_PREFIX = "user/"
USER_KV_QUERIES = frozenset({"kv_get", "kv_put", "kv_put_if_absent", "kv_delete", "kv_list",
                             "kv_add", "kv_cas"})
ATOMIC_TRIES = 1000
"""How often kv_add / kv_cas read and write again when a concurrent writer got in first."""


def answer_kv_query(node: Node, sender: str, msg: m.Query) -> None:
    """Start the store request for `msg`; the reply goes to `sender` when it completes."""

    def reply(data: Any = None, error: str = "") -> None:
        node.loop.send(sender, m.QueryReply(request_id=msg.request_id,
                                            data=msgspec.msgpack.encode(data), error=error))

    try:
        key, value = msgspec.msgpack.decode(msg.arg, type=tuple[str, bytes])
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        reply(error=f"{msg.what}: bad argument ({exc}); expected msgpack [key, value]")
        return

    def answer(result: Callable[[Completion], Any]) -> Callable[[Completion], None]:
        def done(c: Completion) -> None:
            if c.status in (KvStatus.OK, KvStatus.NOT_FOUND, KvStatus.EXISTS):
                reply(result(c))
            else:
                reply(error=f"{msg.what} {key!r}: the control store answered {c.status.name}")

        return done

    def ok(c: Completion) -> bool:
        return c.status is KvStatus.OK

    what = msg.what
    try:
        if what == "kv_get":
            node.control.get(USER_PREFIX + key, answer(lambda c: c.value if ok(c) else None))
        elif what in ("kv_put", "kv_put_if_absent"):
            node.control.put_raw(USER_PREFIX + key, value, answer(ok),
                                 if_absent=what == "kv_put_if_absent")
        elif what == "kv_delete":
            node.control.delete(USER_PREFIX + key, answer(ok))
        elif what in ("kv_add", "kv_cas"):
            _atomic(node, what, USER_PREFIX + key, value, reply)
        else:  # kv_list
            node.control.list_prefix(USER_PREFIX + key, answer(
                lambda c: [r.key[len(USER_PREFIX):] for r in c.records]))
    except ValueError as exc:  # a key the store refuses (too long, wrong type)
        reply(error=f"{what} {key!r}: {exc}")


def _atomic(node: Node, what: str, key: str, arg: bytes,
            reply: Callable[..., None]) -> None:
    """Read-modify-write `key` with a versioned put, again while another writer wins.

    kv_add: `arg` is a decimal int; the value (decimal, 0 when absent) grows by it and the
    answer is the new int. kv_cas: `arg` is msgpack [expected, desired]; the key becomes
    `desired` if it holds `expected` (or has no value and `expected` is empty); the answer
    is the value it holds afterwards."""
    if what == "kv_add":
        try:
            delta = int(arg)
        except ValueError:
            reply(error=f"kv_add {key!r}: the amount must be a decimal int, got {arg[:40]!r}")
            return
    else:
        try:
            expected, desired = msgspec.msgpack.decode(arg, type=tuple[bytes, bytes])
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            reply(error=f"kv_cas {key!r}: bad argument ({exc}); expected msgpack "
                        f"[expected, desired]")
            return
    tries = [0]

    def attempt() -> None:
        tries[0] += 1
        if tries[0] > ATOMIC_TRIES:
            reply(error=f"{what} {key!r}: gave up after {ATOMIC_TRIES} concurrent writes")
            return
        node.control.get(key, read)

    def read(c: Completion) -> None:
        if c.status not in (KvStatus.OK, KvStatus.NOT_FOUND):
            reply(error=f"{what} {key!r}: the control store answered {c.status.name}")
            return
        current = c.value if c.status is KvStatus.OK else None
        version = c.version  # a deleted key keeps its version: 0 only if never written
        if what == "kv_add":
            try:
                new = (int(current) if current else 0) + delta
            except ValueError:
                reply(error=f"kv_add {key!r}: the key holds {current!r:.60}, not an int")
                return
            out: Any = new
            data = str(new).encode()
        else:
            if current != expected and not (current is None and not expected):
                reply(current if current is not None else expected)
                return
            out = data = desired
        node.control.put_raw(key, data, lambda w: wrote(w, out), expected_version=version)

    def wrote(c: Completion, out: Any) -> None:
        if c.status is KvStatus.CAS_FAILED:
            attempt()
        elif c.status is KvStatus.OK:
            reply(out)
        else:
            reply(error=f"{what} {key!r}: the control store answered {c.status.name}")

    attempt()
