"""What one node knows of the other members, and the SWIM rules for merging news into it.

Precedence: a higher incarnation wins; at equal incarnation ALIVE < SUSPECT < DEAD < LEFT,
so only the member itself (by bumping its incarnation) can undo a suspicion or a death.
Metadata merges on its own version. Every change that matters becomes a `MemberEvent`.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import msgspec

from zmesh.core.membership_gossip import AddressSet
from zmesh.core.membership_types import MemberEvent, MemberEventKind, MembershipConfig
from zmesh.protocol.messages.membership import MemberState, MemberUpdate, Metadata

__all__ = ["MemberTable", "LIVE_STATES", "valid_update"]

LIVE_STATES = (MemberState.ALIVE, MemberState.SUSPECT)
_GONE_EVENT = {MemberState.DEAD: MemberEventKind.DEAD, MemberState.LEFT: MemberEventKind.LEFT}


class _Member(msgspec.Struct, dict=True):
    address: str
    state: MemberState
    incarnation: int
    metadata: Metadata
    since: float  # when `state` last changed, for tombstone expiry

    def record(self) -> MemberUpdate:
        return MemberUpdate(self.address, self.state, self.incarnation, self.metadata)


class MemberTable:
    """Every other member a node knows (tombstones of dead and left ones too), the live set,
    the suspicion timers, a round-robin probe order, and the events the changes make."""

    def __init__(self, config: MembershipConfig, rng: random.Random) -> None:
        self._config = config
        self._rng = rng
        self._members: dict[str, _Member] = {}
        self.live = AddressSet()  # alive or suspect
        self.dead: dict[str, float] = {}  # DEAD (not LEFT) members -> since when
        self.suspicions: dict[str, float] = {}  # suspect member -> when it is declared dead
        self.events: list[MemberEvent] = []
        self._probe_order: list[str] = []
        self._probe_next = 0

    def __contains__(self, address: object) -> bool:
        return address in self._members

    def __iter__(self) -> Iterator[MemberUpdate]:
        return (m.record() for m in self._members.values())

    def known(self) -> int:
        """Members held, tombstones of dead and left ones included."""
        return len(self._members)

    def size(self) -> int:
        """Live members counting the owner: the n that timeouts and retransmissions scale with."""
        return len(self.live) + 1

    def record(self, address: str) -> MemberUpdate | None:
        member = self._members.get(address)
        return None if member is None else member.record()

    def state(self, address: str) -> MemberState | None:
        member = self._members.get(address)
        return None if member is None else member.state

    # -- changes -------------------------------------------------------------------------
    def apply(self, now: float, u: MemberUpdate) -> bool:
        """Merge one (validated) update about another member; True if it was news."""
        member = self._members.get(u.address)
        state = MemberState(u.state)
        if member is None:
            meta = u.metadata if u.metadata is not None else Metadata()
            if state in LIVE_STATES:
                member = _Member(u.address, MemberState.DEAD, -1, meta, now)
                self._members[u.address] = member
                self._set_state(member, state, u.incarnation, now)
                return True
            # A tombstone: remember it quietly so that stale gossip cannot revive it.
            self._members[u.address] = _Member(u.address, state, u.incarnation, meta, now)
            if state is MemberState.DEAD:
                self.dead[u.address] = now
            return False
        changed = False
        if (u.incarnation, state) > (member.incarnation, member.state):
            self._set_state(member, state, u.incarnation, now)
            changed = True
        if u.metadata is not None and u.metadata.version > member.metadata.version:
            member.metadata = u.metadata
            changed = True
            if member.state in LIVE_STATES:
                self._event(MemberEventKind.METADATA, member, now)
        return changed

    def adopt(self, now: float, records: list[MemberUpdate]) -> None:
        """Take records of members not known yet, without events (a preloaded view)."""
        for u in records:
            if u.address in self._members:
                continue
            meta = u.metadata if u.metadata is not None else Metadata()
            self._members[u.address] = _Member(u.address, u.state, u.incarnation, meta, now)
            if u.state in LIVE_STATES:
                self.live.add(u.address)
        self._probe_order = list(self.live)
        self._rng.shuffle(self._probe_order)
        self._probe_next = 0

    def suspect(self, now: float, address: str) -> bool:
        """Our own probe of an ALIVE member failed: suspect it. True if that was news."""
        member = self._members.get(address)
        if member is None or member.state is not MemberState.ALIVE:
            return False
        self._set_state(member, MemberState.SUSPECT, member.incarnation, now)
        return True

    def expire_suspicions(self, now: float) -> list[str]:
        """Declare dead the suspects whose window ran out; their addresses."""
        expired = []
        for address, deadline in list(self.suspicions.items()):
            if now >= deadline:
                del self.suspicions[address]
                member = self._members[address]
                self._set_state(member, MemberState.DEAD, member.incarnation, now)
                expired.append(address)
        return expired

    def forget_tombstones(self, now: float) -> list[str]:
        """Drop dead and left members older than the retention; their addresses."""
        cutoff = now - self._config.dead_retention
        gone = [
            a for a, m in self._members.items() if m.state not in LIVE_STATES and m.since < cutoff
        ]
        for address in gone:
            del self._members[address]
            self.dead.pop(address, None)
        return gone

    def _set_state(self, member: _Member, state: MemberState, incarnation: int, now: float) -> None:
        """Move a member to a state, keeping the live set, timers and events consistent."""
        old = member.state
        member.incarnation = incarnation
        if old is state and state is not MemberState.SUSPECT:
            return
        member.state = state
        member.since = now
        address = member.address
        self.suspicions.pop(address, None)
        if state in LIVE_STATES:
            self.dead.pop(address, None)
            if old not in LIVE_STATES:
                self.live.add(address)
                # A random slot in the current pass, so a newcomer is probed soon (memberlist).
                slot = self._rng.randrange(self._probe_next, len(self._probe_order) + 1)
                self._probe_order.insert(slot, address)
                self._event(MemberEventKind.JOINED, member, now)
            if state is MemberState.SUSPECT:
                self.suspicions[address] = now + self._config.suspicion_timeout(self.size())
                if old is not MemberState.SUSPECT:
                    self._event(MemberEventKind.SUSPECT, member, now)
            elif old is MemberState.SUSPECT:
                self._event(MemberEventKind.ALIVE, member, now)
        else:
            if state is MemberState.DEAD:
                self.dead[address] = now
            else:
                self.dead.pop(address, None)
            if old in LIVE_STATES:
                self.live.discard(address)
                self._event(_GONE_EVENT[state], member, now)

    def _event(self, kind: MemberEventKind, member: _Member, now: float) -> None:
        self.events.append(
            MemberEvent(kind, member.address, member.incarnation, now, member.metadata)
        )

    # -- choosing members ----------------------------------------------------------------
    def next_probe_target(self) -> str | None:
        """The next live member in a round-robin over a list reshuffled after each pass."""
        for _ in range(2):
            while self._probe_next < len(self._probe_order):
                address = self._probe_order[self._probe_next]
                self._probe_next += 1
                if address in self.live:
                    return address
            self._probe_order = list(self.live)
            self._rng.shuffle(self._probe_order)
            self._probe_next = 0
        return None

    def random_dead(self, rng: random.Random, now: float, window: float) -> list[str]:
        """One random member dead (not left) for under `window` s, or none."""
        dead = [a for a, since in self.dead.items() if now - since <= window]
        return [rng.choice(dead)] if dead else []

    def random_targets(self, now: float, k: int, dead_window: float) -> list[str]:
        """Up to k random members: live ones, plus those dead for under `dead_window` s
        (so a member wrongly declared dead, say across a partition, hears of it)."""
        dead = [a for a, since in self.dead.items() if now - since <= dead_window]
        if not dead:
            return self.live.sample(self._rng, k)
        picked: list[str] = []
        total = len(self.live) + len(dead)
        for _ in range(min(k, total)):
            if self._rng.randrange(total) < len(dead):
                choice = dead[self._rng.randrange(len(dead))]
                if choice not in picked:
                    picked.append(choice)
            else:
                picked.extend(self.live.sample(self._rng, 1, picked))
        return picked


def valid_update(u: object) -> bool:
    """A well-formed update (the wire decoder checks this too; simulations pass raw objects)."""
    if not isinstance(u, MemberUpdate):
        return False
    meta = u.metadata
    return (
        isinstance(u.address, str)
        and bool(u.address)
        and type(u.incarnation) is int
        and u.incarnation >= 0
        and type(u.state) in (int, MemberState)
        and u.state in (0, 1, 2, 3)
        and (meta is None or (isinstance(meta, Metadata) and type(meta.version) is int))
        and (meta is None or meta.version >= 0)
    )
