"""The control store, live: one `ControlStore` member per node, driven from the node's loop.

Members are the nodes' tcp addresses, set from membership; requests complete through
callbacks on the loop thread. The node keeps named actors here (`named/<ns>/<name>`,
written put-if-absent so a name is unique cluster-wide) and actor locations
(`actor/<id>` -> the actor's home node), so any node can resolve a name or a handle.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

import msgspec

from zmesh.protocol.messages.control import (
    Handoff,
    HandoffAck,
    KvDelete,
    KvGet,
    KvList,
    KvListReply,
    KvPut,
    KvReply,
    Notify,
    Replicate,
    ReplicateAck,
    Subscribe,
    SubSnapshot,
    Unsubscribe,
)
from zmesh.runtime.loop import EventLoop
from zmesh.store.control_requests import Completion
from zmesh.store.control_store import ControlStore, KvStatus

logger = logging.getLogger("zmesh.node")

_MESSAGES = (KvGet, KvPut, KvDelete, KvList, KvReply, KvListReply, Replicate, ReplicateAck,
             Handoff, HandoffAck, Subscribe, Unsubscribe, SubSnapshot, Notify)

Done = Callable[[Completion], None]


def named_key(namespace: str, name: str) -> str:
    return f"named/{namespace}/{name}"


def actor_key(actor_id: bytes) -> str:
    return f"actor/{actor_id.hex()}"


class ControlAgent:
    """This node's control store member and a callback-style client (loop thread only)."""

    def __init__(self, loop: EventLoop, address: str) -> None:
        self.loop = loop
        self.address = address
        self.store = ControlStore(address)
        self.store.set_members(self.loop.clock(), [address])
        self._members: frozenset[str] = frozenset([address])
        self._done: dict[int, Done] = {}
        self._armed = float("inf")
        for cls in _MESSAGES:
            loop.on(cls, self._on_message)
        self._pump()

    # -- client calls ----------------------------------------------------------------------
    def put(self, key: str, value: Any, done: Done | None = None, *,
            if_absent: bool = False) -> None:
        """Write `value` (msgpack-encoded) under `key`; `done(completion)` when answered."""
        self.put_raw(key, msgspec.msgpack.encode(value), done, if_absent=if_absent)

    def put_raw(self, key: str, value: bytes, done: Done | None = None, *,
                if_absent: bool = False, expected_version: int | None = None) -> None:
        """Write `value` as given (the user KV's bytes) under `key`; with
        `expected_version`, only if the key is at that version (0: has none)."""
        self._track(self.store.put(self.loop.clock(), key, value, if_absent=if_absent,
                                   expected_version=expected_version), done)

    def get(self, key: str, done: Done) -> None:
        self._track(self.store.get(self.loop.clock(), key), done)

    def delete(self, key: str, done: Done | None = None) -> None:
        self._track(self.store.delete(self.loop.clock(), key), done)

    def list_prefix(self, prefix: str, done: Done) -> None:
        """The live records under `prefix`, from every shard (`completion.records`)."""
        self._track(self.store.list_prefix(self.loop.clock(), prefix), done)

    @staticmethod
    def decode(completion: Completion) -> Any:
        """The value a completion carries (None when the key has none)."""
        if completion.value is None or completion.status not in (KvStatus.OK, KvStatus.EXISTS):
            return None
        return msgspec.msgpack.decode(completion.value)

    def _track(self, rid: int, done: Done | None) -> None:
        if done is not None:
            self._done[rid] = done
        self._pump()

    # -- membership ------------------------------------------------------------------------
    def set_members(self, live: Iterable[str]) -> None:
        """The live mesh changed (tcp addresses, this node's included or not)."""
        members = frozenset([*live, self.address])
        if members == self._members:
            return
        self._members = members
        self.store.set_members(self.loop.clock(), members)
        self._pump()

    # -- driving ---------------------------------------------------------------------------
    def _on_message(self, sender: str, msg: Any, bufs: list[Any]) -> None:
        self._send(self.store.receive(self.loop.clock(), sender, msg))
        self._pump()

    def _pump(self) -> None:
        now = self.loop.clock()
        self._send(self.store.tick(now))
        for done in self.store.drain_completions():
            callback = self._done.pop(done.rid, None)
            if callback is not None:
                try:
                    callback(done)
                except Exception:  # one bad callback must not stop the store
                    logger.exception("control store callback for %s failed", done.key)
        self.store.drain_notifications()  # no subscriptions yet: keep the queue empty
        deadline = self.store.next_deadline()
        if deadline is not None and deadline < self._armed:
            self._armed = deadline
            self.loop.call_later(max(0.0, deadline - now), self._wake)

    def _wake(self) -> None:
        self._armed = float("inf")
        self._pump()

    def _send(self, out: list[tuple[str, Any]]) -> None:
        for to, msg in out:
            self.loop.send(to, msg)
