"""The control store: a sharded, replicated, versioned key-value store with subscriptions, sans-IO.

One `ControlStore` runs on every member. Keys are placed by a consistent-hash ring over the
live members; a key's first owner (its primary) orders its writes and copies each one to the
other owners (up to `replication`, default 3) before answering.

Guarantees, and how they hold:

- **Acknowledged means on every live owner.** The primary answers a write only after every
  other owner in its view has stored it, so an acknowledged write survives while any one of
  its owners does. (All, not a majority: with crash-stop failures reported by membership,
  waiting for all costs nothing in safety and lets one surviving copy be enough.)
- **One write per key at a time.** The primary queues a key's next write until the previous
  one is acknowledged, so every version but a key's latest is acknowledged, and versions
  are per key 1, 2, 3, ... with no holes. Deletes leave a tombstone that keeps the version.
- **Shards move under a barrier.** On a membership change (`set_members`) every member
  sends every other member a handoff: the records that member now owns and the sender's own
  subscriptions on them. A member serves as primary only after it has the handoff of every
  member of the view, so it continues from the highest version any surviving copy holds.
  The sender drops keys it no longer owns only after every handoff it sent is acknowledged.
  Replication and handoff messages carry the view and are ignored in any other view.
- **Requests during a move** wait at the new primary until its barrier completes; a member
  that is not the primary answers RETRY; the in-flight writes of the old view are answered
  RETRY. Clients resend (`control_requests`), and a resent write that already landed is
  recognised by its writer id (`OpId`, the key remembers its last 8 writers) and answered
  with the version it landed at, not applied twice.
- **Subscribers see each version of each key once, in order**, including deletes; see
  `control_watches` for how a subscription follows its keys from primary to primary.

Views are fingerprints of the member set, so membership must converge (SWIM does) for the
barrier to complete. A member the others removed and took back while it stayed in its view
(paused through the change) never begins the view again itself: it hands its shards over
again when a member's handoff of the view it did not wait for comes (`Handoff.echo`, once),
rolling back its unacknowledged writes first. Tombstones are kept, not collected.
"""

from __future__ import annotations

import heapq
import logging
from collections import deque
from collections.abc import Iterable

import msgspec

from zmesh.core.hashring import HashRing
from zmesh.protocol.messages.control import (
    Handoff,
    HandoffAck,
    KvDelete,
    KvGet,
    KvList,
    KvListReply,
    KvPut,
    KvRecord,
    KvReply,
    KvStatus,
    Notify,
    OpId,
    Replicate,
    ReplicateAck,
    Subscribe,
    SubSnapshot,
    Unsubscribe,
    WatchState,
)
from zmesh.store.control_client import ControlClientCalls
from zmesh.store.control_config import (
    WRITER_WINDOW,
    StoreConfig,
    landed_at,
    split_parts,
    view_id,
)
from zmesh.store.control_requests import Completion, Outbox, RequestTable
from zmesh.store.control_watchers import WatcherRegistry
from zmesh.store.control_watches import Notification, WatchTable

__all__ = ["ControlStore", "StoreConfig", "Completion", "Notification", "KvStatus", "view_id"]

logger = logging.getLogger(__name__)

class _Write(msgspec.Struct):
    record: KvRecord
    prev: KvRecord | None  # the committed record reads return until this one is acknowledged
    client: str
    rid: int
    waiting: set[str]
    resend_at: float


class _Incoming(msgspec.Struct):
    parts: int = 0
    received: set[int] = msgspec.field(default_factory=set)


class ControlStore(ControlClientCalls):
    """One member's share of the control store and its client side; events in, messages out.

    Drive it with `tick(now)`, `receive(now, sender, message)` and `next_deadline()`; client
    calls (`get`, `put`, ...) and `set_members` queue their messages, which the next `tick`
    returns, and `next_deadline()` says so by returning the time of the call.
    """

    def __init__(self, name: str, *, config: StoreConfig | None = None, incarnation: int = 0):
        if not isinstance(name, str) or not name:
            raise ValueError(f"ControlStore name must be a non-empty string, got {name!r}")
        self.name = name
        self.config = config or StoreConfig()
        self.incarnation = incarnation
        self._ring = HashRing(vnodes=self.config.vnodes)
        self._view = view_id(())
        self._ready = False
        self._data: dict[str, KvRecord] = {}
        self._inflight: dict[str, _Write] = {}
        self._write_timers: list[tuple[float, str, int]] = []  # (resend_at, key, version), lazy
        self._queued: dict[str, deque[tuple[str, KvPut | KvDelete]]] = {}
        # Requests waiting for the handoff barrier, once per (sender, rid) however often resent.
        self._parked: dict[tuple[str, int], KvGet | KvPut | KvDelete] = {}
        self._awaiting: dict[str, _Incoming] = {}
        self._handoff_out: dict[tuple[str, int], Handoff] = {}
        self._handoff_resend_at = 0.0
        self._watchers = WatcherRegistry()
        self._outbox: Outbox = []
        self._wake_at = 0.0
        self._next_id = 1
        self._requests = RequestTable(
            request_timeout=self.config.request_timeout,
            attempt_timeout=self.config.attempt_timeout,
            retry_backoff=self.config.retry_backoff,
        )
        self._watches = WatchTable(
            resend_interval=self.config.resend_interval,
            gap_timeout=self.config.gap_timeout,
            resync_interval=self.config.watch_resync_interval,
        )

    # -- state ----------------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        """This member has every handoff of its view and serves its shards."""
        return self._ready

    @property
    def settled(self) -> bool:
        """No shard is moving to or from this member (ready, every handoff it sent confirmed)."""
        outside = self.name not in self._ring
        return outside or (self._ready and not self._handoff_out)

    def local_records(self) -> dict[str, KvRecord]:
        """A copy of the records this member holds, tombstones included (for checks and tools)."""
        return dict(self._data)

    def _queue(self, now: float, out: Outbox) -> None:
        remote = self._deliver(now, out)
        if remote and not self._outbox:
            self._wake_at = now
        self._outbox += remote

    # -- membership -----------------------------------------------------------------------
    def set_members(self, now: float, live: Iterable[str]) -> None:
        """The live member set changed: abort this view's writes and move shards."""
        members = frozenset(live)
        for m in members:
            if not isinstance(m, str) or not m:
                raise ValueError(f"set_members: member names must be non-empty strings, got {m!r}")
        if members == self._ring.members and view_id(members) == self._view:
            return
        out = self._abort_view()
        self._ring = self._ring.with_members(members)
        self._view = view_id(members)
        self._ready = False
        self._awaiting = {}
        self._handoff_out = {}
        self._watchers.clear()
        inside = self.name in members
        if inside:
            out += self._start_handoff(now)
        out += self._requests.reroute(now, self)
        out += self._watches.on_view_change(now, self._ring, self._view, via_handoff=inside)
        self._queue(now, out)

    def _abort_view(self) -> Outbox:
        out: Outbox = [(w.client, KvReply(w.rid, KvStatus.RETRY)) for w in self._inflight.values()]
        for queue in self._queued.values():
            out += [(sender, KvReply(msg.rid, KvStatus.RETRY)) for sender, msg in queue]
        out += [(sender, KvReply(rid, KvStatus.RETRY)) for sender, rid in self._parked]
        self._inflight.clear()
        self._write_timers.clear()
        self._queued.clear()
        self._parked = {}
        return out

    def _owners(self, key: str) -> list[str]:
        return self._ring.owners(key, self.config.replication)

    def _start_handoff(self, now: float) -> Outbox:
        others = sorted(self._ring.members - {self.name})
        self._awaiting = {m: _Incoming() for m in others}
        out = self._send_handoffs(others)
        self._handoff_resend_at = now + self.config.resend_interval
        for watch in self._watches.states_for(self.name, self._ring):
            out += self._hold_watch(self.name, watch)
        if not others:
            out += self._become_ready(now)
        return out

    def _send_handoffs(self, to: list[str], echo: bool = False) -> Outbox:
        """Hand each member of `to` the records it owns in this view (resent until acked)."""
        per_member: dict[str, list[KvRecord]] = {m: [] for m in to}
        for record in self._data.values():
            for owner in self._owners(record.key):
                if owner in per_member:
                    per_member[owner].append(record)
        out: Outbox = []
        for m in to:
            watches = self._watches.states_for(m, self._ring)
            parts = split_parts(per_member[m], self.config.handoff_part_bytes)
            for i, records in enumerate(parts):
                msg = Handoff(self._view, i, len(parts), records, watches if i == 0 else [],
                              echo=echo)
                self._handoff_out[(m, i)] = msg
                out.append((m, msg))
        return out

    def _become_ready(self, now: float) -> Outbox:
        self._ready = True
        out: Outbox = []
        for (subscriber, _), watch in self._watchers.take_owed():
            out.append((subscriber, self._snapshot(watch)))
        parked, self._parked = self._parked, {}
        for (sender, _), msg in parked.items():
            out += self._on_request(now, sender, msg)
        return out

    def _on_handoff(self, now: float, sender: str, msg: Handoff) -> Outbox:
        if msg.view != self._view or self.name not in self._ring or sender not in self._ring:
            return []  # not acknowledged: the sender resends once we agree on the view
        out: Outbox = []
        incoming = self._awaiting.get(sender)
        if incoming is None and not msg.echo \
                and not any(dest == sender for dest, _ in self._handoff_out):
            # A handoff of our view we did not wait for: a resend of one we merged, or the
            # sender began this view again while we stayed in it (we were paused through its
            # view change and back: a node taken for dead that lives on). Then it waits for
            # ours: hand it over again, once (an echo is not echoed). Our writes in flight
            # were never acknowledged (the others ignored this view meanwhile) and another
            # primary may have written the same versions: they go back to what was
            # committed and their writers are answered RETRY, as at a view change; then
            # what the sender hands us is merged (what was written while we were away).
            for key, write in self._inflight.items():
                if write.prev is None:
                    self._data.pop(key, None)
                else:
                    self._data[key] = write.prev
            out += self._abort_view()
            for watch in msg.watches:
                out += self._hold_watch(sender, watch)
            if self._handoff_out:
                self._handoff_resend_at = min(self._handoff_resend_at,
                                              now + self.config.resend_interval)
            else:
                self._handoff_resend_at = now + self.config.resend_interval
            out += self._send_handoffs([sender], echo=True)
        if incoming is None:  # (merged by version: a part merged before changes nothing)
            for record in msg.records:
                self._merge(record)
        elif msg.part not in incoming.received:
            for record in msg.records:
                self._merge(record)
            for watch in msg.watches:
                out += self._hold_watch(sender, watch)
            incoming.received.add(msg.part)
            incoming.parts = msg.parts
            if len(incoming.received) >= incoming.parts:
                del self._awaiting[sender]
                if not self._awaiting:
                    out += self._become_ready(now)
        out.append((sender, HandoffAck(msg.view, msg.part)))
        return out

    def _on_handoff_ack(self, sender: str, msg: HandoffAck) -> None:
        if msg.view != self._view or self._handoff_out.pop((sender, msg.part), None) is None:
            return
        if not self._handoff_out:
            # Every new owner has confirmed its copy: now the keys we no longer own can go.
            for key in [k for k in self._data if k not in self._inflight]:
                if self.name not in self._owners(key):
                    del self._data[key]

    def _merge(self, record: KvRecord) -> None:
        current = self._data.get(record.key)
        if current is None or record.version > current.version:
            self._data[record.key] = record

    # -- primary: requests and replication --------------------------------------------------
    def _on_request(self, now: float, sender: str, msg: KvGet | KvPut | KvDelete) -> Outbox:
        if self.name not in self._ring or self._ring.primary(msg.key) != self.name:
            return [(sender, KvReply(msg.rid, KvStatus.RETRY))]
        if not self._ready:
            self._parked[(sender, msg.rid)] = msg
            return []
        if isinstance(msg, KvGet):
            return [(sender, self._read(msg))]
        if msg.key in self._inflight:
            self._queued.setdefault(msg.key, deque()).append((sender, msg))
            return []
        return self._run_writes(now, msg.key, (sender, msg))

    def _committed(self, key: str) -> KvRecord | None:
        write = self._inflight.get(key)
        return write.prev if write is not None else self._data.get(key)

    def _read(self, msg: KvGet) -> KvReply:
        record = self._committed(msg.key)
        if record is None:
            return KvReply(msg.rid, KvStatus.NOT_FOUND)
        if record.value is None:
            return KvReply(msg.rid, KvStatus.NOT_FOUND, record.version)
        return KvReply(msg.rid, KvStatus.OK, record.version, record.value)

    def _run_writes(self, now: float, key: str, first: tuple[str, KvPut | KvDelete] | None) -> Outbox:
        """Run `first`, then the key's queued writes, until one must wait for its replicas."""
        out: Outbox = []
        item = first
        while True:
            if item is None:
                queue = self._queued.get(key)
                if not queue:
                    self._queued.pop(key, None)
                    return out
                item = queue.popleft()
            out += self._execute(now, *item)
            item = None
            write = self._inflight.get(key)
            if write is not None:
                if write.waiting:
                    return out
                out += self._commit(key)

    def _execute(self, now: float, sender: str, msg: KvPut | KvDelete) -> Outbox:
        key = msg.key
        current = self._data.get(key)
        version = current.version if current is not None else 0
        live = current is not None and current.value is not None
        op = OpId(sender, msg.incarnation, msg.rid)
        landed = landed_at(current, op)
        if landed:  # a resend of a write that already landed: answer it, do not redo it
            return [(sender, KvReply(msg.rid, KvStatus.OK, landed))]
        if msg.expected_version is not None and msg.expected_version != version:
            value = current.value if current is not None else None
            return [(sender, KvReply(msg.rid, KvStatus.CAS_FAILED, version, value))]
        if isinstance(msg, KvPut):
            if msg.if_absent and current is not None and current.value is not None:
                return [(sender, KvReply(msg.rid, KvStatus.EXISTS, version, current.value))]
            new_value: bytes | None = msg.value
        else:
            if not live:
                return [(sender, KvReply(msg.rid, KvStatus.NOT_FOUND, version))]
            new_value = None
        earlier: list[OpId] = []
        if current is not None and current.writer is not None:
            earlier = [current.writer, *current.earlier[: WRITER_WINDOW - 2]]
        record = KvRecord(key, version + 1, new_value, op, earlier)
        self._data[key] = record
        replicas = [m for m in self._owners(key) if m != self.name]
        resend_at = now + self.config.resend_interval
        self._inflight[key] = _Write(record, current, sender, msg.rid, set(replicas), resend_at)
        if replicas:
            heapq.heappush(self._write_timers, (resend_at, key, record.version))
        return [(r, Replicate(self._view, record)) for r in replicas]

    def _commit(self, key: str) -> Outbox:
        write = self._inflight.pop(key)
        out: Outbox = [(write.client, KvReply(write.rid, KvStatus.OK, write.record.version))]
        return out + self._notify(write.record)

    def _on_replicate(self, sender: str, msg: Replicate) -> Outbox:
        record = msg.record
        if msg.view != self._view or self.name not in self._ring:
            return []
        owners = self._owners(record.key)
        if owners[0] != sender or self.name not in owners:
            return []
        self._merge(record)
        return [(sender, ReplicateAck(msg.view, record.key, record.version))]

    def _on_replicate_ack(self, now: float, sender: str, msg: ReplicateAck) -> Outbox:
        write = self._inflight.get(msg.key)
        if msg.view != self._view or write is None or write.record.version != msg.version:
            return []
        write.waiting.discard(sender)
        if write.waiting:
            return []
        return self._commit(msg.key) + self._run_writes(now, msg.key, None)

    def _on_list(self, sender: str, msg: KvList) -> Outbox:
        if msg.view != self._view or not self._ready or self.name not in self._ring:
            return [(sender, KvListReply(msg.rid, msg.view, KvStatus.RETRY))]
        records = []
        for key in self._data:
            if key.startswith(msg.prefix) and self._ring.primary(key) == self.name:
                record = self._committed(key)
                if record is not None and record.value is not None:
                    records.append(record)
        return [(sender, KvListReply(msg.rid, msg.view, KvStatus.OK, records))]

    # -- primary: watches -----------------------------------------------------------------
    def _hold_watch(self, subscriber: str, watch: WatchState) -> Outbox:
        self._watchers.hold(subscriber, watch, owe_snapshot=not self._ready)
        return [(subscriber, self._snapshot(watch))] if self._ready else []

    def _snapshot(self, watch: WatchState) -> SubSnapshot:
        if watch.prefix:
            keys: Iterable[str] = [k for k in self._data if k.startswith(watch.target)]
        else:
            keys = [watch.target]
        records = []
        for key in keys:
            record = self._committed(key)
            if (
                record is not None
                and record.version > watch.since.get(key, 0)
                and self._ring.primary(key) == self.name
            ):
                records.append(record)
        return SubSnapshot(self._view, watch.sub_id, records)

    def _notify(self, record: KvRecord) -> Outbox:
        return [(wk[0], Notify(wk[1], record)) for wk in self._watchers.watching(record.key)]

    def _on_subscribe(self, sender: str, msg: Subscribe) -> Outbox:
        watch = msg.watch
        if msg.view != self._view or self.name not in self._ring:
            return []  # the subscriber resends in the view it moves to
        if not watch.prefix and self._ring.primary(watch.target) != self.name:
            return []
        return self._hold_watch(sender, watch)

    # -- sans-IO driving --------------------------------------------------------------------
    def receive(self, now: float, sender: str, message: object) -> Outbox:
        """Handle one message from `sender`; returns the messages to send."""
        return self._deliver(now, self._dispatch(now, sender, message))

    def _dispatch(self, now: float, sender: str, msg: object) -> Outbox:
        if isinstance(msg, (KvGet, KvPut, KvDelete)):
            return self._on_request(now, sender, msg)
        if isinstance(msg, Replicate):
            return self._on_replicate(sender, msg)
        if isinstance(msg, ReplicateAck):
            return self._on_replicate_ack(now, sender, msg)
        if isinstance(msg, KvReply):
            self._requests.on_reply(now, sender, msg)
        elif isinstance(msg, KvList):
            return self._on_list(sender, msg)
        elif isinstance(msg, KvListReply):
            self._requests.on_list_reply(now, sender, msg)
        elif isinstance(msg, Handoff):
            return self._on_handoff(now, sender, msg)
        elif isinstance(msg, HandoffAck):
            self._on_handoff_ack(sender, msg)
        elif isinstance(msg, Notify):
            self._watches.on_notify(now, msg)
        elif isinstance(msg, SubSnapshot):
            self._watches.on_snapshot(now, sender, msg)
        elif isinstance(msg, Subscribe):
            return self._on_subscribe(sender, msg)
        elif isinstance(msg, Unsubscribe):
            self._watchers.drop((sender, msg.sub_id))
        else:
            logger.warning("control store %s dropped %s from %s: not a control store message",
                           self.name, type(msg).__name__, sender)
        return []

    def _deliver(self, now: float, out: Outbox) -> Outbox:
        """Handle messages addressed to this member here; return those for others."""
        remote: Outbox = []
        pending = deque(out)
        while pending:
            dest, msg = pending.popleft()
            if dest == self.name:
                pending.extend(self._dispatch(now, self.name, msg))
            else:
                remote.append((dest, msg))
        return remote

    def tick(self, now: float) -> Outbox:
        """Send what is queued and what is due: resends, retries, timeouts."""
        out, self._outbox = self._outbox, []
        if self._handoff_out and self._handoff_resend_at <= now:
            self._handoff_resend_at = now + self.config.resend_interval
            out += [(dest, msg) for (dest, _), msg in self._handoff_out.items()]
        while self._write_timers and self._write_timers[0][0] <= now:
            at, key, version = heapq.heappop(self._write_timers)
            write = self._live_write(at, key, version)
            if write is not None:  # unacknowledged: resend to the replicas still missing it
                write.resend_at = now + self.config.resend_interval
                heapq.heappush(self._write_timers, (write.resend_at, key, version))
                out += [(r, Replicate(self._view, write.record)) for r in sorted(write.waiting)]
        out += self._requests.tick(now, self)
        out += self._watches.tick(now, self._ring, self._view)
        return self._deliver(now, out)

    def _live_write(self, at: float, key: str, version: int) -> _Write | None:
        write = self._inflight.get(key)
        if write is None or write.record.version != version or write.resend_at != at:
            return None
        return write if write.waiting else None

    def next_deadline(self) -> float | None:
        """When `tick` next has something to do, or None."""
        times = []
        while self._write_timers:
            at, key, version = self._write_timers[0]
            if self._live_write(at, key, version) is not None:
                times.append(at)
                break
            heapq.heappop(self._write_timers)
        if self._outbox:
            times.append(self._wake_at)
        if self._handoff_out:
            times.append(self._handoff_resend_at)
        for t in (self._requests.next_deadline(), self._watches.next_deadline()):
            if t is not None:
                times.append(t)
        return min(times, default=None)
