"""Subscriber side of the control store: subscriptions, and delivering changes in version order.

The subscriber owns its subscriptions; primaries only hold copies. When the ring changes,
the subscriber hands each new primary its watches with the last version it has seen of
every key (inside the shard handoff, so a primary knows every watcher before it commits
anything), and the primary answers with whatever is newer. Changes can arrive out of order
or twice (from the old and the new primary); they are buffered and delivered per key in
version order, each version once. Every `resync_interval` a subscription asks its primaries
again for anything newer than it has seen, so a lost notification is noticed even when no
later change follows it. A hole that stays open for `gap_timeout` (only possible after message
loss) is delivered anyway with `skipped` saying how many versions were missed.

A store that is not a member itself (it sends no handoff) resubscribes with `Subscribe`
after each membership change instead; a write committed by a new primary before that
arrives can then only be reported with `skipped`, so subscribe through a member.
"""

from __future__ import annotations

import msgspec

from zmesh.core.hashring import HashRing
from zmesh.protocol.messages.control import (
    KvRecord,
    Notify,
    Subscribe,
    SubSnapshot,
    Unsubscribe,
    WatchState,
)
from zmesh.store.control_requests import Outbox

__all__ = ["Notification", "WatchTable", "watch_matches"]


class Notification(msgspec.Struct, frozen=True):
    """One change of a watched key. `value` None means the key was deleted.

    `initial` marks the current value reported when a subscription starts; `skipped` counts
    versions that were lost before this one (always 0 unless messages were lost).
    """

    sub_id: int
    key: str
    version: int
    value: bytes | None
    initial: bool = False
    skipped: int = 0

    @property
    def deleted(self) -> bool:
        return self.value is None


def watch_matches(watch: WatchState, key: str) -> bool:
    """Whether a change of `key` concerns `watch`."""
    return key.startswith(watch.target) if watch.prefix else key == watch.target


class _Sub(msgspec.Struct):
    sub_id: int
    target: str
    prefix: bool
    last_seen: dict[str, int] = msgspec.field(default_factory=dict)
    established: bool = False  # every primary's first snapshot has arrived
    awaiting: set[str] = msgspec.field(default_factory=set)  # primaries whose snapshot is missing
    view: int = 0  # the view `awaiting` belongs to
    resend_at: float = 0.0
    resync_at: float = 0.0
    buffer: dict[str, dict[int, KvRecord]] = msgspec.field(default_factory=dict)
    gap_since: dict[str, float] = msgspec.field(default_factory=dict)
    early: list[KvRecord] = msgspec.field(default_factory=list)  # changes seen before established


class WatchTable:
    """The subscriptions of one member and the notifications ready for its clients."""

    def __init__(self, *, resend_interval: float, gap_timeout: float, resync_interval: float):
        self.resend_interval = resend_interval
        self.gap_timeout = gap_timeout
        self.resync_interval = resync_interval
        self._subs: dict[int, _Sub] = {}
        self._ready: list[Notification] = []
        self._established: list[_Sub] = []

    def __contains__(self, sub_id: object) -> bool:
        return sub_id in self._subs

    # -- subscription lifecycle ---------------------------------------------------------
    def add(self, now: float, sub_id: int, target: str, prefix: bool, ring: HashRing, view: int) -> Outbox:
        """Start a subscription: ask each primary it spans for a snapshot."""
        sub = _Sub(sub_id, target, prefix)
        self._subs[sub_id] = sub
        return self._resubscribe(now, sub, ring, view)

    def remove(self, sub_id: int, ring: HashRing) -> Outbox:
        """End a subscription; its pending notifications stay drainable."""
        sub = self._subs.pop(sub_id, None)
        if sub is None:
            return []
        return [(m, Unsubscribe(sub_id)) for m in self._spanned(sub, ring)]

    def _spanned(self, sub: _Sub, ring: HashRing) -> list[str]:
        if not ring.members:
            return []
        return sorted(ring.members) if sub.prefix else [ring.primary(sub.target)]

    def _state_for(self, sub: _Sub, member: str, ring: HashRing) -> WatchState:
        since = {k: v for k, v in sub.last_seen.items() if ring.primary(k) == member}
        return WatchState(sub.sub_id, sub.target, sub.prefix, since)

    def _resubscribe(self, now: float, sub: _Sub, ring: HashRing, view: int) -> Outbox:
        sub.view = view
        sub.awaiting = set(self._spanned(sub, ring))
        sub.resend_at = now + self.resend_interval
        sub.resync_at = now + self.resync_interval
        return [(m, Subscribe(view, self._state_for(sub, m, ring))) for m in sorted(sub.awaiting)]

    def states_for(self, member: str, ring: HashRing) -> list[WatchState]:
        """The watches `member` must hold as primary on `ring` (sent in the shard handoff)."""
        return [
            self._state_for(sub, member, ring)
            for sub in self._subs.values()
            if member in self._spanned(sub, ring)
        ]

    def on_view_change(self, now: float, ring: HashRing, view: int, *, via_handoff: bool) -> Outbox:
        """The ring changed. Members deliver their watches in the handoff; others resubscribe."""
        out: Outbox = []
        for sub in self._subs.values():
            if via_handoff:
                sub.view = view
                sub.awaiting = set(self._spanned(sub, ring)) if not sub.established else set()
                sub.resend_at = now + self.resend_interval
            else:
                out += self._resubscribe(now, sub, ring, view)
        return out

    # -- incoming changes ---------------------------------------------------------------
    def on_snapshot(self, now: float, sender: str, msg: SubSnapshot) -> None:
        """A primary's records for a watch: the baseline of a new one, catch-up for an old one."""
        sub = self._subs.get(msg.sub_id)
        if sub is None:
            return
        if msg.view == sub.view:
            sub.awaiting.discard(sender)
        if sub.established:
            for record in msg.records:
                self._order(now, sub, record)
            return
        for record in msg.records:
            if record.version > sub.last_seen.get(record.key, 0):
                sub.last_seen[record.key] = record.version
                if record.value is not None:
                    self._emit(sub, record, initial=True)
        if not sub.awaiting:
            sub.established = True
            self._established.append(sub)
            early, sub.early = sub.early, []
            for record in sorted(early, key=lambda r: r.version):
                self._order(now, sub, record)

    def on_notify(self, now: float, msg: Notify) -> None:
        """A committed change from a primary."""
        sub = self._subs.get(msg.sub_id)
        if sub is None:
            return
        if not sub.established:
            sub.early.append(msg.record)
        else:
            self._order(now, sub, msg.record)

    def _order(self, now: float, sub: _Sub, record: KvRecord) -> None:
        key = record.key
        last = sub.last_seen.get(key, 0)
        if record.version <= last:
            return  # already delivered
        if record.version > last + 1:
            sub.buffer.setdefault(key, {})[record.version] = record
            sub.gap_since.setdefault(key, now)
            return
        self._emit(sub, record)
        sub.last_seen[key] = record.version
        held = sub.buffer.get(key)
        while held and sub.last_seen[key] + 1 in held:
            nxt = held.pop(sub.last_seen[key] + 1)
            self._emit(sub, nxt)
            sub.last_seen[key] = nxt.version
        if held is not None:
            for v in [v for v in held if v <= sub.last_seen[key]]:
                del held[v]
            if not held:
                del sub.buffer[key]
        if key not in sub.buffer:
            sub.gap_since.pop(key, None)

    def _emit(self, sub: _Sub, record: KvRecord, *, initial: bool = False, skipped: int = 0) -> None:
        self._ready.append(
            Notification(sub.sub_id, record.key, record.version, record.value, initial, skipped)
        )

    # -- timers -------------------------------------------------------------------------
    def tick(self, now: float, ring: HashRing, view: int) -> Outbox:
        """Resend unanswered subscribes; give up waiting on holes older than `gap_timeout`."""
        out: Outbox = []
        for sub in self._subs.values():
            if sub.awaiting and sub.resend_at <= now:
                sub.resend_at = now + self.resend_interval
                out += [(m, Subscribe(view, self._state_for(sub, m, ring))) for m in sorted(sub.awaiting)]
            elif sub.established and sub.resync_at <= now:
                sub.resync_at = now + self.resync_interval
                out += [(m, Subscribe(view, self._state_for(sub, m, ring))) for m in self._spanned(sub, ring)]
            for key, since in list(sub.gap_since.items()):
                if since + self.gap_timeout <= now:
                    self._skip_gap(sub, key)
        return out

    def _skip_gap(self, sub: _Sub, key: str) -> None:
        held = sub.buffer.pop(key, {})
        sub.gap_since.pop(key, None)
        for version in sorted(held):
            last = sub.last_seen.get(key, 0)
            self._emit(sub, held[version], skipped=version - last - 1)
            sub.last_seen[key] = version

    def next_deadline(self) -> float | None:
        times: list[float] = []
        for sub in self._subs.values():
            if sub.awaiting:
                times.append(sub.resend_at)
            elif sub.established:
                times.append(sub.resync_at)
            times.extend(t + self.gap_timeout for t in sub.gap_since.values())
        return min(times, default=None)

    def drain(self) -> list[Notification]:
        """Take the notifications ready for clients, in delivery order."""
        ready, self._ready = self._ready, []
        return ready

    def drain_established(self) -> list[tuple[int, str]]:
        """Take the (sub_id, target) of subscriptions whose initial snapshot is now complete."""
        done, self._established = self._established, []
        return [(sub.sub_id, sub.target) for sub in done]
