"""The user KV: drivers and workers read and write keys of the sharded control store.

Keys live under `user/` so that user code never touches the runtime's own records.
Requests arrive as `Query` messages (`kv_get`, `kv_put`, `kv_put_if_absent`, `kv_delete`,
`kv_list`) with a
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
USER_KV_QUERIES = frozenset({"kv_get", "kv_put", "kv_put_if_absent", "kv_delete", "kv_list"})


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
        else:  # kv_list
            node.control.list_prefix(USER_PREFIX + key, answer(
                lambda c: [r.key[len(USER_PREFIX):] for r in c.records]))
    except ValueError as exc:  # a key the store refuses (too long, wrong type)
        reply(error=f"{what} {key!r}: {exc}")
