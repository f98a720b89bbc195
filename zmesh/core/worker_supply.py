"""How many worker processes a node starts and keeps warm: the node-lease core's pool policy.

Two kinds of start, told apart:

- a *demand* start serves something that waits (an actor to place, a granted lease) while no
  worker is idle: one per waiter that no start under way will serve, up to `starting_max`
  at once (the rest start as those register or fail). A new node's first task waits for the
  workers started ahead of it rather than starting a third.
- a *spare* replaces workers that exited, so that `keep()` are idle or starting: one, or as
  many as were recently in use beyond those busy now, at most `spares_max`. A node that
  creates and kills batches of actors thus has the next batch's workers ready (a start
  costs ~10 ms of CPU and far more wall time on a busy host), and one that stops needing
  them gives them back: every `TRIM_S` the period's peak is rotated, and idle spares that
  never ran anything beyond `keep()` and the pool at rest (`floor`) retire, so a surplus
  lives one to two periods.

Spares were once one per exit, with no bound and nothing retired: a node churning actors
held ~170 processes and ~600 fds. Then one at a time: bounded, but each actor of a batch
after the first waited for its own start (0.11-0.23x of the anchor's actor creation rate).
"""

from __future__ import annotations

import msgspec

from zmesh.core.lease_records import Queues, WorkerRecord, WorkerRole
from zmesh.core.node_lease_events import Action, RetireWorker, SetTimer, SpawnWorker

SPARES_MAX = 32
"""Most idle or starting spares a node keeps beyond what waits: the next batch of actors
finds up to this many warm; each holds a process (~10 MB private) and a few fds."""

STARTING_MAX = 32
"""Most workers starting at once: a burst of a thousand actors starts them in waves."""

TRIM_S = 10.0
"""How often a node looks at its idle workers: one period's peak use is kept one more
period, so a surplus idle worker retires 10-20 s after the last use that needed it."""

TRIM_KEY = ("trim", b"")


class WorkerSupply(msgspec.Struct):
    """Workers starting, the recent peak in use, and how many to start or retire."""

    floor: int = 1  # the pool at rest: idle workers never retired
    spares_max: int = SPARES_MAX
    starting_max: int = STARTING_MAX
    starting: int = 0  # spawned, neither registered nor exited yet
    peak: int = 0  # most workers in use at once this period
    peak_prev: int = 0  # ... and in the period before
    trimming: bool = False  # a trim timer is armed

    def note_busy(self, busy: int) -> None:
        """`busy` workers are in use (leased, handed to actors, or on their way out)."""
        if busy > self.peak:
            self.peak = busy

    def keep(self, busy: int) -> int:
        """Spares to keep idle or starting after exits: one, or what was recently in use and
        is not now."""
        recent = self.peak if self.peak > self.peak_prev else self.peak_prev
        return min(self.spares_max, max(1, recent - busy))

    def to_start(self, waiting: int, idle: int, busy: int, *, spares: bool) -> int:
        """How many to start now, with `waiting` waiters, `idle` idle and `busy` busy workers
        (`spares`: after an exit, the spares too); counted as starting. Those waiting are
        about to be busy: the spares kept for recent use shrink by them."""
        want = waiting
        if spares:
            short = self.keep(busy + waiting) - idle
            if short > 0:
                want += short
        n = min(want, self.starting_max) - self.starting
        if n <= 0:
            return 0
        self.starting += n
        return n

    def prestart(self, count: int) -> int:
        """The node starts `count` workers ahead of demand: its pool at rest."""
        self.floor = count
        n = max(0, min(count, self.starting_max - self.starting))
        self.starting += n
        return n

    def started(self) -> None:
        """A worker registered, or exited before it did: one start fewer under way."""
        if self.starting:  # a worker this core did not start (a test's) counts for nothing
            self.starting -= 1

    def period(self, busy: int, idle: int) -> int:
        """The trim timer fired: rotate the peaks; how many idle workers may retire now."""
        self.peak_prev, self.peak = self.peak, busy
        return max(0, idle - max(self.floor, self.keep(busy)))


class PoolRules:
    """The node-lease core's rules on starting and retiring workers (`NodeLeases` mixes
    them in; they read and change its records)."""

    workers: dict[bytes, WorkerRecord]
    queues: Queues
    supply: WorkerSupply
    stopping: bool

    def _busy(self) -> int:
        """Registered workers not idle: leased, handed to actors, or on their way out."""
        return len(self.workers) - len(self.queues.idle)

    def _in_use(self, rec: WorkerRecord, role: WorkerRole) -> None:
        rec.role, rec.used = role, True
        self.supply.note_busy(self._busy())

    def _top_up(self, *, spares: bool = False) -> list[Action]:
        """Start a worker for each waiter no start under way serves; after an exit, the
        spares to keep too (see `worker_supply`)."""
        if self.stopping:
            return []
        n = self.supply.to_start(len(self.queues.wants) + len(self.queues.leases),
                                 len(self.queues.idle), self._busy(), spares=spares)
        return [SpawnWorker() for _ in range(n)]

    def can_trim(self) -> bool:
        """More idle workers than the pool at rest, one of them never used: a spare that may
        retire. Only those: a worker that ran a task may still own its objects or nested
        tasks, and retiring it would lose them (Ray asks such a worker, which refuses)."""
        idle = self.queues.idle
        return len(idle) > self.supply.floor and any(not self.workers[w].used for w in idle)

    def _trim(self) -> list[Action]:
        """Spares beyond what recent use calls for retire, the least recently idle first;
        the timer stays armed while one may still go."""
        self.supply.trimming = False
        if self.stopping:
            return []
        idle = self.queues.idle
        out: list[Action] = []
        n = self.supply.period(self._busy(), len(idle))
        for worker in [w for w in idle if not self.workers[w].used][:n]:
            idle.remove(worker)
            self.workers[worker].role = WorkerRole.RETIRED
            out.append(RetireWorker(worker, "an idle spare beyond the pool at rest"))
        return out + self._arm_trim()

    def _arm_trim(self) -> list[Action]:
        """The trim timer, if none is armed and a spare beyond the pool at rest may retire."""
        if self.supply.trimming or not self.can_trim():
            return []
        self.supply.trimming = True
        return [SetTimer(TRIM_S, TRIM_KEY)]
