"""SWIM gossip membership as a sans-IO state machine: events in, messages out, no sockets.

One `Membership` per node. The I/O shell calls `tick(now)` when `next_deadline()` comes,
`receive(now, sender, message)` for each decoded message, and sends every returned
`(address, message)` pair. `now` is any monotonic clock in seconds (SimNet's virtual one,
or `time.monotonic()`). The protocol (Das et al., with memberlist's refinements):

- each probe period one member is probed, round-robin over a shuffled list; no ack within
  `ack_timeout` -> `indirect_probes` members probe it for us; nothing by the end of the
  period -> it is SUSPECT at its incarnation;
- a suspected member that hears of it refutes by bumping its incarnation; a suspicion
  that outlives the window (scaled with log n) makes it DEAD; `leave()` announces LEFT;
- news rides on probes and acks (each update sent ~lambda*log(n) times), plus gossip rounds
  to a few random members while there is news, plus a periodic full-state push-pull with one
  random member (anti-entropy, which also reconnects the two sides of a healed partition);
- each node's metadata (free resources, labels) is versioned and spreads the same way;
- Lifeguard's local health: a member that had to refute a suspicion of itself probes with a
  longer period and ack timeout (one more multiple per refutation, `max_health_penalty` at
  most) until its probes are answered in time again, and a tick that comes far too late
  (this node was frozen) blames no probe target.
"""

from __future__ import annotations

import logging
import math
import random
from typing import Union

import msgspec

from zmesh.core.membership_gossip import UpdateQueue
from zmesh.core.membership_table import MemberTable, valid_update
from zmesh.core.membership_types import (
    MemberEvent,
    MemberEventKind,
    MemberInfo,
    MembershipConfig,
)
from zmesh.protocol.messages.membership import (
    Gossip,
    Join,
    MemberState,
    MemberUpdate,
    Metadata,
    Probe,
    ProbeAck,
    ProbeRequest,
    PushPull,
)

__all__ = [
    "Membership",
    "MembershipConfig",
    "MemberInfo",
    "MemberEvent",
    "MemberEventKind",
    "MemberState",
    "Metadata",
    "Outbox",
]

log = logging.getLogger("zmesh.membership")

MembershipMessage = Union[Probe, ProbeAck, ProbeRequest, Gossip, Join, PushPull]
Outbox = list[tuple[str, MembershipMessage]]


class _Probe(msgspec.Struct, dict=True):
    target: str
    seq: int
    ack_deadline: float
    end: float
    acked: bool = False
    indirect_sent: bool = False
    sent: float = 0.0


class Membership:
    """The SWIM membership view of the node at `address`; see the module docstring."""

    def __init__(
        self,
        address: str,
        *,
        config: MembershipConfig | None = None,
        rng: random.Random | None = None,
        resources: dict[str, float] | None = None,
        labels: dict[str, str] | None = None,
    ) -> None:
        if not isinstance(address, str) or not address:
            raise ValueError(f"membership address must be a non-empty string, got {address!r}")
        self.address = address
        self.config = config if config is not None else MembershipConfig()
        self._rng = rng if rng is not None else random.Random()
        self._incarnation = 0
        self._metadata = Metadata(0, dict(resources or {}), dict(labels or {}))
        self._left = False
        self._table = MemberTable(self.config, self._rng)  # the other members
        self._queue = UpdateQueue(self.config.max_queued_updates)
        self._probe: _Probe | None = None
        self._relays: dict[int, tuple[str, int, float]] = {}  # our seq -> (origin, its seq, expiry)
        self._seq = 0
        self._started = False
        self._last_tick = 0.0
        self._next_probe = self._next_gossip = self._next_push_pull = math.inf
        self._next_gc = math.inf
        self._seeds: list[str] = []
        self._next_join = math.inf
        self._health = 0  # Lifeguard's local health penalty (see MembershipConfig)
        # the incarnations at which someone declared us dead (each death is declared at one
        # incarnation, and we refute past it): how many times we were taken for dead
        self._deaths: set[int] = set()
        # members we held dead that came back alive (a higher incarnation) without having
        # heard of their death: they refuted a suspicion, not the death. Each is told the
        # death it lived through (the record we held), so that it fences what we gave up on.
        self._death_notices: dict[str, MemberUpdate] = {}

    # -- public view ---------------------------------------------------------------------
    @property
    def incarnation(self) -> int:
        """This node's own incarnation (bumped each time it refutes a suspicion)."""
        return self._incarnation

    @property
    def health_penalty(self) -> int:
        """Lifeguard's local health penalty: 0 when healthy; its probe period and ack
        timeout are (1 + this) times the configured ones."""
        return self._health

    @property
    def declared_dead(self) -> int:
        """How many times a member declared this node dead (each death heard once, whatever
        its incarnation: a death declared before a refutation reached the declarer still
        happened). The shell fences what the others gave up on when this grows."""
        return len(self._deaths)

    @property
    def metadata(self) -> Metadata:
        """This node's own metadata as it advertises it."""
        return self._metadata

    def members(self) -> dict[str, MemberInfo]:
        """Every member this node knows, itself included; dead and left ones until forgotten."""
        view = {self.address: self._info(self._record_self())}
        for record in self._table:
            view[record.address] = self._info(record)
        return view

    def live_members(self) -> list[str]:
        """Addresses of the members that are alive or suspected, itself included, sorted."""
        own = [] if self._left else [self.address]
        return sorted([*self._table.live, *own])

    def has_peers(self) -> bool:
        """True while another member is alive or suspected (someone to tell news to)."""
        return bool(len(self._table.live))

    def drain_events(self) -> list[MemberEvent]:
        """The view changes since the last call, oldest first."""
        events, self._table.events = self._table.events, []
        return events

    # -- commands ------------------------------------------------------------------------
    def join(self, now: float, seeds: list[str]) -> Outbox:
        """Ask the seed members to let us in; retried until one answers with its view."""
        seeds = [s for s in seeds if s != self.address]
        if not seeds:
            raise ValueError(
                f"join needs at least one seed address other than our own ({self.address!r})"
            )
        self._start(now)
        self._seeds = seeds
        self._next_join = now + self.config.join_retry_interval
        return [(s, Join(self._record_self())) for s in seeds]

    def leave(self, now: float) -> Outbox:
        """Leave gracefully: tell a few members now and keep answering probes with LEFT."""
        self._start(now)
        self._left = True
        self._seeds = []
        self._next_join = math.inf
        self._probe = None
        self._queue.push(self.address)
        targets = self._table.live.sample(self._rng, self.config.leave_fanout)
        return [(t, Gossip([self._record_self()])) for t in targets]

    def set_metadata(
        self,
        resources: dict[str, float] | None = None,
        labels: dict[str, str] | None = None,
    ) -> None:
        """Advertise new resources and/or labels (None keeps the current ones)."""
        res = self._metadata.resources if resources is None else resources
        lab = self._metadata.labels if labels is None else labels
        for name, value in res.items():
            if (
                not isinstance(name, str)
                or isinstance(value, bool)
                or not isinstance(value, (int, float))
            ):
                raise TypeError(f"resources must map str to float, got {name!r}: {value!r}")
        for name, text in lab.items():
            if not isinstance(name, str) or not isinstance(text, str):
                raise TypeError(f"labels must map str to str, got {name!r}: {text!r}")
        self._metadata = Metadata(
            self._metadata.version + 1, {k: float(v) for k, v in res.items()}, dict(lab)
        )
        self._queue.push(self.address)

    def preload(self, now: float, records: list[MemberUpdate]) -> None:
        """Adopt a settled view without events or gossip, as if a join had long finished.

        For simulations and benchmarks that start from a converged mesh of many nodes.
        """
        self._start(now)
        self._table.adopt(now, [u for u in records if u.address != self.address])
        self._seeds = []
        self._next_join = math.inf

    # -- SimNet / event-loop protocol ----------------------------------------------------
    def next_deadline(self) -> float | None:
        """When `tick` must next run (-inf before the first tick: run it now)."""
        if not self._started:
            return -math.inf
        if self._left:
            return self._next_gc
        # Timers with nothing to do wait (a node alone woke ~6 times a second for nothing):
        # probes and push-pulls need another member, gossip news and someone to tell, and
        # the clean-up tombstones or relays. A member arriving re-arms them (its message
        # makes the shell ask again), and they run at once: their times have passed.
        deadline = self._next_join
        table = self._table
        if len(table.live):
            deadline = min(deadline, self._next_probe, self._next_push_pull)
        elif table.dead:
            deadline = min(deadline, self._next_push_pull)
        if self._relays or table.known() > len(table.live):
            deadline = min(deadline, self._next_gc)
        probe = self._probe
        if probe is not None and not probe.acked and not probe.indirect_sent:
            deadline = min(deadline, probe.ack_deadline)
        if len(self._queue) and (len(table.live) or table.dead):
            deadline = min(deadline, self._next_gossip)
        if table.suspicions:
            deadline = min(deadline, min(table.suspicions.values()))
        return deadline

    def tick(self, now: float) -> Outbox:
        """Run the timers that are due: probes, suspicion expiry, gossip, push-pull, joins."""
        cfg = self.config
        if not self._started:
            self._start(now)
        # A tick far later than the probe period means this node itself was frozen or
        # starved (Lifeguard's insight): its probe result says nothing about the target.
        late = now - self._last_tick > 2 * cfg.probe_interval * (1 + self._health)
        self._last_tick = now
        out: Outbox = []
        if self._left:
            if now >= self._next_gc:
                self._next_gc = now + 1.0
                self._expire_relays(now)
            return out
        self._run_probe(now, late, out)
        for address in self._table.expire_suspicions(now):
            self._queue.push(address)
        if now >= self._next_gossip and len(self._queue):
            # One round counts as one send of its batch, whatever the fan-out: with few
            # members, lambda*log(n) single sends can miss a member entirely. A round with
            # nobody to send to (a joiner before its seed answered) uses up no sends.
            targets = self._table.random_targets(now, cfg.gossip_fanout, cfg.gossip_to_dead)
            if targets:
                batch = self._take_batch()
                for target in targets:
                    out.append((target, Gossip(self._piggyback(target, batch))))
            self._next_gossip = now + cfg.gossip_interval
        if now >= self._next_push_pull:
            # Anti-entropy with one live member every period, whatever the number of dead
            # ones (picking among live and dead alike let a few crashes starve it), plus one
            # recently dead member, which reconnects the sides of a healed partition.
            self._next_push_pull = now + cfg.push_pull_period(self._n())
            targets = self._table.live.sample(self._rng, 1)
            targets += self._table.random_dead(self._rng, now, cfg.dead_retention)
            out.extend((t, PushPull(self._full_state())) for t in targets)
        if now >= self._next_join:
            self._next_join = now + cfg.join_retry_interval
            out.extend((s, Join(self._record_self())) for s in self._seeds)
        if now >= self._next_gc:
            self._next_gc = now + 1.0
            for address in self._table.forget_tombstones(now):
                self._queue.discard(address)
            self._expire_relays(now)
        return out

    def receive(self, now: float, sender: str, message: object) -> Outbox:
        """Handle one message from `sender`; malformed or unknown ones are logged and dropped."""
        try:
            return self._receive(now, sender, message)
        except (TypeError, ValueError, AttributeError) as exc:
            log.warning(
                "membership %s: dropped bad %s from %r: %s",
                self.address,
                type(message).__name__,
                sender,
                exc,
            )
            return []

    # -- message handling ----------------------------------------------------------------
    def _receive(self, now: float, sender: str, message: object) -> Outbox:
        if not isinstance(sender, str) or not sender:
            raise ValueError(f"sender must be a non-empty address, got {sender!r}")
        out: Outbox = []
        if isinstance(message, Probe):
            self._merge(now, message.updates)
            out.append((sender, ProbeAck(message.seq, self._piggyback(sender))))
        elif isinstance(message, ProbeAck):
            self._merge(now, message.updates)
            probe = self._probe
            if probe is not None and message.seq == probe.seq:
                if (not probe.acked and self._health
                        and now - probe.sent <= self._health * self.config.probe_interval):
                    self._health -= 1  # in time with one penalty less: we keep up again
                probe.acked = True
            else:
                relay = self._relays.pop(message.seq, None)
                if relay is not None:
                    origin, origin_seq, _ = relay
                    out.append((origin, ProbeAck(origin_seq, self._piggyback(origin))))
        elif isinstance(message, ProbeRequest):
            if not isinstance(message.target, str) or not message.target:
                raise ValueError(f"probe request target must be an address: {message.target!r}")
            self._merge(now, message.updates)
            if message.target == self.address:
                out.append((sender, ProbeAck(message.seq, self._piggyback(sender))))
            else:
                seq = self._next_seq()
                self._relays[seq] = (sender, message.seq, now + self.config.probe_interval)
                out.append((message.target, Probe(seq, self._piggyback(message.target))))
        elif isinstance(message, Gossip):
            self._merge(now, message.updates)
        elif isinstance(message, Join):
            self._merge(now, [message.member])
            out.append((sender, PushPull(self._full_state(), reply=True)))
        elif isinstance(message, PushPull):
            self._merge(now, message.members)
            if message.reply and self._seeds and len(self._table.live):
                # Our join is answered with a live member in it (a seed that has just left
                # answers too, maybe before it knew anyone: then we keep retrying). Announce
                # ourselves as well (as memberlist does), so that our arrival does not hang on
                # the seed's gossip alone: it may leave or crash right away, or spend its sends
                # on members that are gone.
                self._queue.push(self.address)
                self._seeds = []
                self._next_join = math.inf
            if not message.reply:
                out.append((sender, PushPull(self._full_state(), reply=True)))
        else:
            raise TypeError(f"not a membership message: {type(message).__name__}")
        # Tell a member we hold dead that it is, so that it can refute (healed partitions).
        record = self._table.record(sender)
        replied = any(dest == sender for dest, _ in out)
        if record is not None and record.state is MemberState.DEAD and not replied:
            out.append((sender, Gossip([record])))
        while self._death_notices:
            address, death = self._death_notices.popitem()
            out.append((address, Gossip([death])))
        return out

    def _merge(self, now: float, updates: object) -> None:
        if not isinstance(updates, list):
            raise TypeError(f"updates must be a list, got {type(updates).__name__}")
        for u in updates:
            if not valid_update(u):
                log.warning("membership %s: dropped malformed update %r", self.address, u)
                continue
            assert isinstance(u, MemberUpdate)
            if u.address == self.address:
                self._about_me(u)
                continue
            before = self._table.record(u.address)
            if self._table.apply(now, u):
                self._queue.push(u.address)
                if before is not None and MemberState(before.state) is MemberState.DEAD \
                        and self._table.state(u.address) is not MemberState.DEAD:
                    self._death_notices[u.address] = before

    def _about_me(self, u: MemberUpdate) -> None:
        """Someone's record of us: refute suspicion or death, and keep our versions highest."""
        theirs = u.metadata
        # A record of ours newer than what we hold: we restarted and lost our version.
        if (
            theirs is not None
            and theirs.version >= self._metadata.version
            and theirs != self._metadata
        ):
            mine = self._metadata
            self._metadata = Metadata(theirs.version + 1, mine.resources, mine.labels)
            self._queue.push(self.address)
        state = MemberState(u.state)
        if state is MemberState.DEAD and not self._left and (
                theirs is None or theirs.labels == self._metadata.labels):
            self._deaths.add(u.incarnation)  # (other labels: a past life at this address)
        if self._left:
            if u.incarnation > self._incarnation:
                self._incarnation = u.incarnation
            if (u.incarnation, state) != (self._incarnation, MemberState.LEFT):
                self._queue.push(self.address)
        elif u.incarnation > self._incarnation or (
            u.incarnation == self._incarnation and state is not MemberState.ALIVE
        ):
            self._incarnation = u.incarnation + 1
            if state is not MemberState.ALIVE:
                self._penalize()  # someone gave up on our answers: we may be the slow one
            log.info(
                "membership %s: refuting %s at incarnation %d",
                self.address,
                state.name,
                u.incarnation,
            )
            self._queue.push(self.address)

    # -- probing -------------------------------------------------------------------------
    def _run_probe(self, now: float, late: bool, out: Outbox) -> None:
        cfg = self.config
        probe = self._probe
        if probe is not None and not probe.acked:
            if not probe.indirect_sent and probe.ack_deadline <= now:
                probe.indirect_sent = True  # sent now, or moot when late or the period is over
                if not late and now < probe.end:
                    helpers = self._table.live.sample(
                        self._rng, cfg.indirect_probes, (probe.target,)
                    )
                    for helper in helpers:
                        request = ProbeRequest(probe.seq, probe.target, self._piggyback(helper))
                        out.append((helper, request))
            if now >= probe.end:
                if not late and self._table.suspect(now, probe.target):
                    log.debug("membership %s: %s missed its probe", self.address, probe.target)
                    self._queue.push(probe.target)
                self._probe = None
        if now < self._next_probe:
            return
        self._probe = None
        scale = 1 + self._health
        self._next_probe = now + cfg.probe_interval * scale
        target = self._table.next_probe_target()
        if target is None:
            return
        seq = self._next_seq()
        self._probe = _Probe(target, seq, now + cfg.ack_timeout * scale,
                             now + cfg.probe_interval * scale, sent=now)
        out.append((target, Probe(seq, self._piggyback(target))))

    # -- dissemination -------------------------------------------------------------------
    def _piggyback(self, dest: str, batch: list[str] | None = None) -> list[MemberUpdate]:
        """Updates to carry on a message to `dest`: its own bad news first, then `batch`
        (by default the next few from the queue, each counting as one more send)."""
        if batch is None:
            batch = self._take_batch()
        updates: list[MemberUpdate] = []
        if self._left and self.address not in batch:
            # A left member says so in every answer, not just its first few: a member that
            # still holds it alive (news of its join that outran its leave) learns it left.
            updates.append(self._record_self())
        theirs = self._table.record(dest)
        told_dest = theirs is not None and theirs.state in (MemberState.SUSPECT, MemberState.DEAD)
        if theirs is not None and told_dest:
            updates.append(theirs)
        for address in batch:
            if address == self.address:
                updates.append(self._record_self())
            elif address != dest or not told_dest:
                known = self._table.record(address)
                if known is not None:
                    updates.append(known)
        return updates

    def _take_batch(self) -> list[str]:
        limit = self.config.retransmit_limit(self._n())
        return self._queue.take(self.config.max_piggyback, limit)

    def _full_state(self) -> list[MemberUpdate]:
        return [self._record_self(), *self._table]

    def _record_self(self) -> MemberUpdate:
        state = MemberState.LEFT if self._left else MemberState.ALIVE
        return MemberUpdate(self.address, state, self._incarnation, self._metadata)

    @staticmethod
    def _info(r: MemberUpdate) -> MemberInfo:
        return MemberInfo(r.address, r.state, r.incarnation, r.metadata or Metadata())

    # -- housekeeping --------------------------------------------------------------------
    def _start(self, now: float) -> None:
        if self._started:
            return
        self._started = True
        cfg = self.config
        self._last_tick = now
        # Random phases keep the nodes of a mesh from probing and gossiping in lock-step.
        self._next_probe = now + self._rng.uniform(0, cfg.probe_interval)
        self._next_gossip = now + self._rng.uniform(0, cfg.gossip_interval)
        self._next_push_pull = now + self._rng.uniform(0, cfg.push_pull_interval)
        self._next_gc = now + 1.0

    def _n(self) -> int:
        return self._table.size()

    def _penalize(self) -> None:
        self._health = min(self._health + 1, self.config.max_health_penalty)

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _expire_relays(self, now: float) -> None:
        for seq, (_, _, expiry) in list(self._relays.items()):
            if expiry <= now:
                del self._relays[seq]
