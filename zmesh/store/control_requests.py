"""Client side of the control store: requests in flight, their routing, retries and results.

A request goes to its key's primary on the caller's ring (a listing goes to every member).
It is resent when the primary answers RETRY (not primary, or its shard is moving), when an
attempt times out (the primary may have died), and at once when the ring moves the key to
another primary; it completes with TIMEOUT only when `request_timeout` passes. Writes are
safe to resend: the primary recognises a write that already landed by its `OpId`.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from typing import Protocol

import msgspec

from zmesh.core.hashring import HashRing
from zmesh.protocol.messages.base import Message
from zmesh.protocol.messages.control import (
    KvDelete,
    KvGet,
    KvList,
    KvListReply,
    KvPut,
    KvRecord,
    KvReply,
    KvStatus,
)

__all__ = ["Completion", "RequestTable", "Router", "Outbox"]

Outbox = list[tuple[str, Message]]


class Router(Protocol):
    """What the request table needs to know of the membership: the ring and its view id."""

    @property
    def ring(self) -> HashRing: ...

    @property
    def view(self) -> int: ...


class Completion(msgspec.Struct, frozen=True):
    """The result of one request: `op` is 'get', 'put', 'delete' or 'list'.

    `version` is the key's version after a put or delete, its current one otherwise
    (0 when it never existed); `records` holds a listing's live records, sorted by key.
    """

    rid: int
    op: str
    key: str
    status: KvStatus
    version: int = 0
    value: bytes | None = None
    records: tuple[KvRecord, ...] = ()

    @property
    def ok(self) -> bool:
        """The request did what it asked (a get found the key, a write landed)."""
        return self.status is KvStatus.OK


class _Pending(msgspec.Struct):
    op: str
    key: str
    message: KvGet | KvPut | KvDelete | KvList
    give_up_at: float
    resend_at: float = 0.0
    target: str | None = None
    list_members: frozenset[str] = frozenset()
    list_parts: dict[str, list[KvRecord]] = msgspec.field(default_factory=dict)


class RequestTable:
    """Requests this member has sent and not yet seen answered; produces messages, not I/O."""

    def __init__(self, *, request_timeout: float, attempt_timeout: float, retry_backoff: float):
        self.request_timeout = request_timeout
        self.attempt_timeout = attempt_timeout
        self.retry_backoff = retry_backoff
        self._pending: dict[int, _Pending] = {}
        self._done: list[Completion] = []
        # (resend_at, rid), possibly stale: an entry counts only while it matches the request.
        self._timers: list[tuple[float, int]] = []

    def __len__(self) -> int:
        return len(self._pending)

    def start(
        self, now: float, op: str, key: str, message: KvGet | KvPut | KvDelete | KvList, router: Router
    ) -> Outbox:
        """Track a new request and send its first attempt."""
        p = _Pending(op, key, message, give_up_at=now + self.request_timeout)
        self._pending[message.rid] = p
        return self._send(now, p, router)

    def _set_timer(self, p: _Pending, at: float) -> None:
        p.resend_at = at
        heapq.heappush(self._timers, (at, p.message.rid))

    def _send(self, now: float, p: _Pending, router: Router) -> Outbox:
        ring = router.ring
        if not ring.members:  # no member to ask yet: try again once one is known
            p.target = None
            self._set_timer(p, now + self.retry_backoff)
            return []
        self._set_timer(p, now + self.attempt_timeout)
        if isinstance(p.message, KvList):
            p.message = KvList(p.message.rid, p.message.prefix, router.view)
            p.list_members = ring.members
            p.list_parts = {}
            return [(member, p.message) for member in sorted(ring.members)]
        p.target = ring.primary(p.key)
        return [(p.target, p.message)]

    def on_reply(self, now: float, sender: str, msg: KvReply) -> None:
        """Complete a get/put/delete, or schedule a resend when the primary said RETRY."""
        p = self._pending.get(msg.rid)
        if p is None or isinstance(p.message, KvList):
            return  # a late duplicate answer
        if msg.status is KvStatus.RETRY:
            if sender == p.target and now + self.retry_backoff < p.resend_at:
                self._set_timer(p, now + self.retry_backoff)  # (a RETRY from an older target is stale)
            return
        del self._pending[msg.rid]
        self._done.append(Completion(msg.rid, p.op, p.key, msg.status, msg.version, msg.value))

    def on_list_reply(self, now: float, sender: str, msg: KvListReply) -> None:
        """Gather one member's share of a listing; complete when every member of its view answered."""
        p = self._pending.get(msg.rid)
        if p is None or not isinstance(p.message, KvList) or msg.view != p.message.view:
            return
        if msg.status is not KvStatus.OK:
            if now + self.retry_backoff < p.resend_at:
                self._set_timer(p, now + self.retry_backoff)
            return
        p.list_parts[sender] = msg.records
        if set(p.list_parts) >= p.list_members:
            del self._pending[msg.rid]
            records = sorted((r for part in p.list_parts.values() for r in part), key=_by_key)
            self._done.append(Completion(msg.rid, "list", p.key, KvStatus.OK, records=tuple(records)))

    def reroute(self, now: float, router: Router) -> Outbox:
        """The ring changed: resend requests whose primary moved, and every listing."""
        out: Outbox = []
        ring = router.ring
        for p in self._pending.values():
            moved = p.target is None or p.target not in ring or ring.primary(p.key) != p.target
            if moved or isinstance(p.message, KvList):
                out += self._send(now, p, router)
        return out

    def tick(self, now: float, router: Router) -> Outbox:
        """Resend what is due; give up on requests past their timeout."""
        out: Outbox = []
        while self._timers and self._timers[0][0] <= now:
            at, rid = heapq.heappop(self._timers)
            p = self._pending.get(rid)
            if p is None or p.resend_at != at:
                continue  # stale timer
            if p.give_up_at <= now:
                del self._pending[rid]
                self._done.append(Completion(rid, p.op, p.key, KvStatus.TIMEOUT))
            else:
                out += self._send(now, p, router)
        return out

    def next_deadline(self) -> float | None:
        """When the next resend or give-up is due."""
        timers = self._timers
        while timers:
            at, rid = timers[0]
            p = self._pending.get(rid)
            if p is not None and p.resend_at == at:
                return at
            heapq.heappop(timers)
        return None

    def drain(self) -> list[Completion]:
        """Take the completed requests, oldest first."""
        done, self._done = self._done, []
        return done

    def __iter__(self) -> Iterator[int]:
        return iter(self._pending)


def _by_key(record: KvRecord) -> str:
    return record.key
