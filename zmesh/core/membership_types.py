"""Configuration, view records and events of the SWIM membership core (`zmesh.core.membership`)."""

from __future__ import annotations

import enum
import math

import msgspec

from zmesh.protocol.messages.membership import MemberState, Metadata

__all__ = ["MembershipConfig", "MemberInfo", "MemberEvent", "MemberEventKind"]


class MembershipConfig(msgspec.Struct, frozen=True):
    """Timing and fan-out of the protocol; the defaults target a LAN mesh of up to ~1,000 nodes.

    With the defaults a crashed node is known dead everywhere within ~3 s at 100 members,
    each member sends a constant ~10 messages/s in steady state whatever the mesh size,
    and a member frozen for less than the suspicion window (0.8 s at 10 members, 1.6 s at
    100, 2.4 s at 1,000) refutes the suspicion and is not declared dead. A member that had
    to refute suspicions probes more slowly for a while (`max_health_penalty`).
    """

    probe_interval: float = 0.2
    """Seconds between probes; each period one member is probed (round-robin, shuffled)."""
    ack_timeout: float = 0.08
    """Seconds to wait for a direct ack before asking `indirect_probes` members to probe."""
    indirect_probes: int = 3
    """Members asked to probe a target that missed its direct ack (SWIM's k)."""
    suspicion_mult: float = 4.0
    """Suspicion window = suspicion_mult * max(1, log10(n)) * probe_interval."""
    retransmit_mult: int = 4
    """Each update is piggybacked retransmit_mult * ceil(log10(n + 1)) times (SWIM's lambda)."""
    max_piggyback: int = 8
    """Most updates carried on one message."""
    max_queued_updates: int = 2048
    """Bound of the dissemination buffer; past it the most-sent update is dropped."""
    gossip_interval: float = 0.2
    """Seconds between gossip rounds; a round is sent only when there is news."""
    gossip_fanout: int = 3
    """Members each gossip round goes to."""
    push_pull_interval: float = 5.0
    """Seconds between full-state exchanges with one random member (scaled up past 32 nodes)."""
    join_retry_interval: float = 1.0
    """Seconds between join attempts until a seed answers."""
    leave_fanout: int = 5
    """Members told directly of a graceful leave (the rest hear it by gossip)."""
    gossip_to_dead: float = 10.0
    """Seconds a dead member still gets gossip, so that one wrongly declared dead hears it."""
    dead_retention: float = 60.0
    """Seconds a dead or left member's record is kept (stops stale gossip reviving it)."""
    max_health_penalty: int = 8
    """Lifeguard's local health: each suspicion of itself a member had to refute stretches
    its own probe period and ack timeout by one more multiple, up to this many, and each
    probe answered in time takes one back: an overloaded member probes less eagerly
    instead of suspecting members whose answers it is too slow to read."""

    def __post_init__(self) -> None:
        for f in msgspec.structs.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"MembershipConfig.{f.name} must be a number, got {value!r}")
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"MembershipConfig.{f.name} must be positive, got {value!r}")
        if self.ack_timeout >= self.probe_interval:
            raise ValueError(
                f"MembershipConfig.ack_timeout ({self.ack_timeout}) must be shorter than "
                f"probe_interval ({self.probe_interval}) to leave time for indirect probes"
            )

    def suspicion_timeout(self, n: int) -> float:
        """Seconds a suspected member has to refute before it is declared dead, at n members."""
        return self.suspicion_mult * max(1.0, math.log10(max(n, 1))) * self.probe_interval

    def retransmit_limit(self, n: int) -> int:
        """How many times each update is piggybacked, at n members."""
        return int(self.retransmit_mult * math.ceil(math.log10(n + 1)))

    def push_pull_period(self, n: int) -> float:
        """Seconds between push-pull exchanges at n members (slower in big meshes, as memberlist)."""
        if n <= 32:
            return self.push_pull_interval
        return self.push_pull_interval * (math.ceil(math.log2(n) - 5) + 1)


class MemberInfo(msgspec.Struct, frozen=True):
    """One member as this node sees it; `metadata` holds its free resources and labels."""

    address: str
    state: MemberState
    incarnation: int
    metadata: Metadata

    @property
    def is_live(self) -> bool:
        """True while the member counts as part of the mesh (alive or merely suspected)."""
        return self.state in (MemberState.ALIVE, MemberState.SUSPECT)


class MemberEventKind(str, enum.Enum):
    """What changed. `joined`/`dead`/`left` enter and leave the live set; `suspect`/`alive`
    happen inside it; `metadata-changed` is a newer metadata version."""

    JOINED = "joined"
    SUSPECT = "suspect"
    ALIVE = "alive"
    DEAD = "dead"
    LEFT = "left"
    METADATA = "metadata-changed"


class MemberEvent(msgspec.Struct, frozen=True):
    """A change in this node's view of another member, at time `at` (the caller's clock)."""

    kind: MemberEventKind
    address: str
    incarnation: int
    at: float
    metadata: Metadata
