"""A node's worker leases, pure: events in, actions out.

Why a core of its own rather than more of the scheduler: the scheduler decides *resources*
(what fits, where, what waits) for tasks and actors alike; this machine decides what a node
does with *worker processes and lease ids*: which worker a granted lease gets, which waits
for one to start, what a blocked get lends, what an owner's, a worker's or a peer node's
death does to the leases they touched. It drives the scheduler (a pure object too) and
passes the decisions that are not about leases (actors, placement groups) out unchanged.

The node's shell (runtime/node/leases.py) feeds it the protocol's messages, process exits,
peer deaths and timers, and carries out its actions through narrow ports.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Iterable

import msgspec

from zmesh.core import node_lease_checks
from zmesh.core.lease_records import (
    DEAD_OWNERS_KEPT,
    FORWARD_SWEEP_S,
    STOP_GRACE_S,
    STORY_LEN,
    SWEEP_KEY,
    Lease,
    Queues,
    WorkerRecord,
    WorkerRole,
    mentions,
)
from zmesh.core.node_lease_events import (
    SIGKILL,
    SIGTERM,
    Action,
    Decided,
    Event,
    FollowPassedOn,
    ForwardFailed,
    ForwardLease,
    ForwardRepeated,
    ForwardSent,
    Grant,
    HandedWorkerDied,
    HandWorker,
    KillWorker,
    LeaseDone,
    LeaseEvicted,
    LeaseRequested,
    LeaseReturned,
    NodeStopping,
    OwnerDied,
    PassedOn,
    PeerDied,
    PrestartWorkers,
    RefuseLease,
    RemoteLeaseState,
    RetireWorker,
    ReturnToRemote,
    Revoke,
    Scheduled,
    SetTimer,
    SpawnWorker,
    TellOrigin,
    TellWorkerExited,
    Timer,
    Warn,
    WorkerBlocked,
    WorkerExited,
    WorkerGivenBack,
    WorkerStarted,
    WorkerWanted,
)
from zmesh.core.scheduler import LocalScheduler
from zmesh.core.scheduling import (
    Decision,
    Dispatch,
    Failed,
    Forward,
    Infeasible,
    Pending,
)
from zmesh.core.worker_supply import TRIM_KEY, PoolRules, WorkerSupply
from zmesh.errors import TaskUnschedulableError, ZmeshSystemError


class NodeLeases(PoolRules):
    """A node's leases and workers: `handle(event) -> list[Action]`."""

    def __init__(self, scheduler: LocalScheduler, *, story_len: int = STORY_LEN) -> None:
        self.scheduler = scheduler
        self.leases: dict[bytes, Lease] = {}
        self.workers: dict[bytes, WorkerRecord] = {}
        self.queues = Queues()
        self.stopping = False
        self.sweeping = False  # a forward sweep is armed
        self.supply = WorkerSupply()
        """Workers starting, and the spares to keep (see `worker_supply`)."""
        self.dead_owners: dict[str, None] = {}  # the latest DEAD_OWNERS_KEPT, oldest first
        self._log: deque[tuple[Event, list[Action]]] = deque(maxlen=story_len)

    # -- queries ---------------------------------------------------------------------------
    def idle_count(self) -> int:
        return len(self.queues.idle)

    def role(self, worker: bytes) -> WorkerRole | None:
        rec = self.workers.get(worker)
        return rec.role if rec is not None else None

    # -- the one entry point -----------------------------------------------------------------
    def handle(self, event: Event) -> list[Action]:
        actions = self._handle(event)
        self._log.append((event, actions))
        return actions

    def _handle(self, event: Event) -> list[Action]:  # noqa: C901 - one dispatch, one place
        lease: Lease | None
        match event:
            case LeaseRequested():
                if event.owner in self.dead_owners:
                    # Sent just before its owner died, read after: granted, it would hold a
                    # worker for no one. Refused: an owner only taken for dead hears why.
                    return [RefuseLease(event.lease_id, event.owner, event.request_id,
                                        ZmeshSystemError(f"this node took {event.owner} for "
                                                         "dead and freed what it held"),
                                        event.origin)]
                lease = self.leases.get(event.lease_id)
                if lease is not None:
                    if not lease.remote:
                        return []  # a duplicate of a request held here: it already runs/waits
                    # One we forwarded came back to us (its holder passed it on): place it here.
                    lease.remote, lease.remote_granted = "", False
                    return self._submit(lease, event.request.hops)
                lease = Lease(event.lease_id, event.owner, event.request_id, event.name,
                              event.request, event.payload, origin=event.origin)
                self.leases[lease.lease_id] = lease
                return self._submit(lease, event.request.hops)
            case LeaseReturned():
                return self._returned(event)
            case PrestartWorkers():
                if self.stopping:
                    return []
                return [SpawnWorker() for _ in range(self.supply.prestart(event.count))]
            case WorkerStarted():
                if event.worker in self.workers:
                    return []  # registered twice: it already serves
                self.supply.started()
                self.workers[event.worker] = WorkerRecord(event.worker)
                return self._give_idle(event.worker) + self._top_up()
            case WorkerExited():
                return self._worker_exited(event.worker, event.reason)
            case WorkerBlocked():
                return self._blocked(event.worker, event.blocked)
            case WorkerWanted():
                if self.queues.idle:
                    worker = self.queues.idle.pop()
                    self._in_use(self.workers[worker], WorkerRole.HANDED)
                    return [HandWorker(event.token, worker)]
                self.queues.wants.append(event.token)
                return self._top_up()
            case WorkerGivenBack():
                rec = self.workers.get(event.worker)
                if rec is None or rec.role is not WorkerRole.HANDED:
                    return []
                return self._give_idle(event.worker)
            case OwnerDied():
                return self._owner_died(event.owner)
            case PeerDied():
                return self._peer_died(event)
            case RemoteLeaseState():
                lease = self.leases.get(event.lease_id)
                if lease is None and event.granted:
                    # We keep a record of every lease we forwarded until its owner returns
                    # it: none means it was returned (that word was lost) or given up. Given
                    # up (we took its holder for dead and told the owner its worker exited),
                    # the worker may still run a task the owner retried elsewhere: it stops,
                    # as a dead owner's does (given back idle, its node granted it again while
                    # busy, once to that task's own nested call: a lease leaked for good).
                    return [ReturnToRemote(event.lease_id, event.sender, True, False)]
                if lease is None or not lease.remote:
                    return []
                if event.granted:
                    lease.remote, lease.remote_granted = event.sender, True
                    lease.quiet = False  # its holder still has it
                elif event.unknown and not lease.remote_granted:
                    # Asked again, the holder has no record of it: it dropped the request
                    # unanswered (it took us for dead under a long pause, or passed it on to
                    # a node that died). Place it again, or the owner waits forever.
                    return self._lost_remote(lease, f"its node {event.sender} no longer has it")
                else:
                    # Done there: returned by its owner, refused, or its worker is gone. The
                    # owner hears it from us too: the holder told it once, and that word can
                    # be lost, with the holder's worker's last answer (an owner with tasks on
                    # the dead worker, or still waiting for a grant it never had, waited
                    # forever). An owner that returned the lease ignores it.
                    del self.leases[event.lease_id]
                    return [TellWorkerExited(lease.lease_id, lease.owner, None,
                                             f"its lease ended on node {event.sender}",
                                             lease.request_id)]
                return []
            case ForwardRepeated():
                return self._repeated(event)
            case ForwardSent():
                lease = self.leases.get(event.lease_id)
                if lease is None:
                    return []
                if lease.origin:  # passing it on: the origin keeps the record, not us
                    del self.leases[event.lease_id]
                    return [PassedOn(event.lease_id, event.address)]
                lease.remote = event.address
                return self._arm_sweep()
            case ForwardFailed():
                lease = self.leases.get(event.lease_id)
                if lease is None:
                    return []
                if lease.remote:  # sent again, and its node is gone meanwhile
                    return self._lost_remote(lease, "its node is gone")
                return self._submit(lease, event.hops)
            case LeaseEvicted():
                lease = self.leases.get(event.lease_id)
                if lease is None:
                    return []
                if lease.worker is None:  # granted, waiting for a worker: it never runs
                    return self._evict_waiting(lease)
                lease.evicted = True
                lease.lent = False
                return [KillWorker(lease.worker, SIGKILL)]
            case Scheduled():
                return self._route(event.decisions)
            case Timer():
                if event.key == SWEEP_KEY:
                    return self._sweep()
                if event.key == TRIM_KEY:
                    return self._trim()
                rec = self.workers.get(event.key[1])
                if rec is not None and rec.role is WorkerRole.STOPPING:
                    return [KillWorker(rec.worker, SIGKILL)]
                return []
            case NodeStopping():
                self.stopping = True
                return []
        raise TypeError(f"unknown node-lease event {event!r}")

    # -- leases ----------------------------------------------------------------------------
    def _submit(self, lease: Lease, hops: int) -> list[Action]:
        lease.request = msgspec.structs.replace(lease.request, hops=hops)
        try:
            decisions = self.scheduler.submit(lease.request)
        except Exception as exc:  # bad resources, unknown node: fail the request clearly
            del self.leases[lease.lease_id]
            return [RefuseLease(lease.lease_id, lease.owner, lease.request_id, exc, lease.origin)]
        return self._route(decisions)

    def _route(self, decisions: Iterable[Decision]) -> list[Action]:
        out: list[Action] = []
        for d in decisions:
            lease = self.leases.get(d.work_id) if hasattr(d, "work_id") else None
            if lease is None:
                out.append(Decided(d))
            elif isinstance(d, Dispatch):
                out += self._dispatch(lease, d)
            elif isinstance(d, Pending | Infeasible):
                out += self._revoke_others(lease)
                if isinstance(d, Infeasible):
                    out.append(Warn(lease.owner, lease.name, (
                        f"{lease.name} cannot be scheduled on any node: {d.reason}. It stays "
                        "pending until a node that fits joins.")))
            elif isinstance(d, Failed):
                del self.leases[lease.lease_id]
                out.append(RefuseLease(lease.lease_id, lease.owner, lease.request_id, d.error,
                                       lease.origin))
            elif isinstance(d, Forward):
                lease.forwarded = ForwardLease(lease.lease_id, d.node_id, d.request.hops,
                                               lease.origin, lease.payload)
                lease.quiet = False
                out.append(lease.forwarded)
            else:
                out.append(Decided(d))
        return out

    def _evict_waiting(self, lease: Lease) -> list[Action]:
        self.queues.leases = deque(w for w in self.queues.leases if w[0] != lease.lease_id)
        del self.leases[lease.lease_id]
        self.scheduler.cancel(lease.lease_id)  # forgets the eviction; frees nothing more
        error = TaskUnschedulableError(f"{lease.name} cannot run: its placement group was removed")
        return [RefuseLease(lease.lease_id, lease.owner, lease.request_id, error, lease.origin)]

    def _dispatch(self, lease: Lease, d: Dispatch) -> list[Action]:
        if self.queues.idle:
            return self._grant(lease, d, self.queues.idle.pop())
        self.queues.leases.append((lease.lease_id, d))
        return self._top_up()

    def _grant(self, lease: Lease, d: Dispatch, worker: bytes) -> list[Action]:
        rec = self.workers[worker]
        self._in_use(rec, WorkerRole.LEASED)
        rec.lease = lease.lease_id
        lease.worker, lease.gpu_ids = worker, d.gpu_ids
        grant: list[Action] = [Grant(lease.lease_id, lease.owner, lease.request_id, worker,
                                     d.gpu_ids, lease.origin)]
        return grant + self._arm_sweep() if lease.origin else grant

    def _revoke_others(self, waiting: Lease) -> list[Action]:
        return [Revoke(le.lease_id, le.owner) for le in self.leases.values()
                if le.worker is not None and (le.owner != waiting.owner
                                              or le.name != waiting.name)]

    def _returned(self, event: LeaseReturned) -> list[Action]:
        lease = self.leases.get(event.lease_id)
        if lease is None:
            return [FollowPassedOn(event.lease_id, event.owner_died, event.retire)]
        if lease.remote:
            del self.leases[lease.lease_id]
            return [ReturnToRemote(lease.lease_id, lease.remote, event.owner_died, event.retire)]
        out = self._stop_worker(lease) if event.owner_died else []
        return out + self._release(lease, retire=event.retire)

    def _release(self, lease: Lease, retire: bool = False) -> list[Action]:
        """Free a lease held here: its resources, then its worker (idle again, or retired)."""
        self.leases.pop(lease.lease_id, None)
        out: list[Action] = [LeaseDone(lease.lease_id, lease.origin)] if lease.origin else []
        waiting = self.queues.leases
        if lease.worker is None and any(lid == lease.lease_id for lid, _ in waiting):
            self.queues.leases = deque(w for w in waiting if w[0] != lease.lease_id)
        # cancel frees running work and drops waiting work; with the CPU lent out while
        # blocked, nothing more is held.
        decisions = self.scheduler.cancel(lease.lease_id)
        rec = self.workers.get(lease.worker) if lease.worker is not None else None
        if rec is not None and rec.role is WorkerRole.LEASED:
            rec.lease = None
            if retire:
                rec.role = WorkerRole.RETIRED
                out.append(RetireWorker(rec.worker))
            else:
                out += self._give_idle(rec.worker)
        return out + self._route(decisions)

    def _stop_worker(self, lease: Lease) -> list[Action]:
        """The owner died: its worker may hold that owner's queued tasks, so it stops rather
        than going idle (SIGTERM, then SIGKILL after a grace period)."""
        rec = self.workers.get(lease.worker) if lease.worker is not None else None
        if rec is None or rec.role is not WorkerRole.LEASED:
            return []
        rec.role, rec.lease = WorkerRole.STOPPING, None
        return [KillWorker(rec.worker, SIGTERM), SetTimer(STOP_GRACE_S, ("stop", rec.worker))]

    def _owner_died(self, owner: str) -> list[Action]:
        self.dead_owners[owner] = None
        if len(self.dead_owners) > DEAD_OWNERS_KEPT:
            del self.dead_owners[next(iter(self.dead_owners))]
        out: list[Action] = []
        for lease in [le for le in self.leases.values() if le.owner == owner]:
            if lease.remote:
                del self.leases[lease.lease_id]
                out.append(ReturnToRemote(lease.lease_id, lease.remote, True, False))
            else:
                out += self._stop_worker(lease)
                out += self._release(lease)
        return out

    def _peer_died(self, event: PeerDied) -> list[Action]:
        out: list[Action] = []
        for lease in list(self.leases.values()):
            if lease.remote == event.address:
                out += self._lost_remote(lease, f"its node {event.node_id} {event.why}")
            elif lease.origin == event.address:
                # Its owner went with that node, or was taken for dead with it and lives on:
                # its worker may be mid-task, so it stops (handed out idle, it would take new
                # tasks behind one that never ends); a live owner hears that the worker is
                # gone and retries, a live origin that the lease is done (it keeps a record).
                if lease.worker is not None:
                    out.append(TellWorkerExited(lease.lease_id, lease.owner, lease.worker,
                                                f"its owner's node {event.node_id} {event.why}",
                                                lease.request_id))
                out += self._stop_worker(lease)
                out += self._release(lease)
        return out

    def _lost_remote(self, lease: Lease, why: str) -> list[Action]:
        """The node holding a lease we forwarded is gone. Its worker went with it: the owner
        retries what it sent there. Whether or not word of a grant came to us, the owner may
        never have had it (its copy of the grant, or ours, can be lost), and once told the
        worker exited it gives back any later copy of that grant: so the request is placed
        again under a fresh lease id. The owner takes that grant only if it still waits for
        its request, and gives it back otherwise; a stale id can never be mistaken for the new
        lease. (Placed again only when no grant was heard of, an owner whose grant was lost
        waited forever: a nested get under a pause, a node death and lossy links left the
        blocked task's lease granted for good.)"""
        del self.leases[lease.lease_id]
        out: list[Action] = [TellWorkerExited(lease.lease_id, lease.owner, None, why,
                                              lease.request_id)]
        new_id = hashlib.blake2b(lease.lease_id, digest_size=len(lease.lease_id),
                                 person=b"zmesh-replace").digest()
        again = msgspec.structs.replace(
            lease, lease_id=new_id, request=msgspec.structs.replace(lease.request, work_id=new_id),
            remote="", remote_granted=False, forwarded=None, quiet=False)
        self.leases[new_id] = again
        return out + self._submit(again, 0)

    def _arm_sweep(self) -> list[Action]:
        if self.sweeping:
            return []
        self.sweeping = True
        return [SetTimer(FORWARD_SWEEP_S, SWEEP_KEY)]

    def _sweep(self) -> list[Action]:
        """Leases that cross nodes, looked over every period while any exists: one we
        forwarded with no word for a whole period is sent again (a lost request, grant or
        "done": its holder answers where it stands); one we hold for another node is granted
        again, to its owner and origin (a lost grant; if the origin no longer has the lease,
        it sends the return again)."""
        out: list[Action] = []
        waiting = False
        for lease in self.leases.values():
            if lease.origin and lease.worker is not None:
                waiting = True
                # to its origin, and to its owner on another host: the grant may have been
                # lost (the owner ignores a copy of one it took, returns one it no longer wants)
                out.append(Grant(lease.lease_id, lease.owner, lease.request_id, lease.worker,
                                 lease.gpu_ids, lease.origin))
                continue
            if not lease.remote or lease.forwarded is None:
                continue
            waiting = True
            if lease.quiet:
                out.append(lease.forwarded)
            lease.quiet = True
        self.sweeping = waiting
        if waiting:
            out.append(SetTimer(FORWARD_SWEEP_S, SWEEP_KEY))
        return out

    def _repeated(self, event: ForwardRepeated) -> list[Action]:
        """A lease forwarded here came again: say again where it stands (the first word may
        have been lost); one still waiting for resources says nothing yet."""
        lease = self.leases.get(event.lease_id)
        if lease is None:  # returned, refused, or dropped: the origin tells them apart
            return [TellOrigin(event.lease_id, event.origin, None, unknown=True)]
        if lease.origin != event.origin or lease.worker is None:
            return []
        return [TellOrigin(lease.lease_id, event.origin, lease.worker)]

    # -- workers ---------------------------------------------------------------------------
    def _give_idle(self, worker: bytes) -> list[Action]:
        lease: Lease | None
        rec = self.workers[worker]
        rec.lease = None
        if self.queues.leases:
            lease_id, d = self.queues.leases.popleft()
            lease = self.leases.get(lease_id)
            if lease is not None:
                return self._grant(lease, d, worker)
        if self.queues.wants:
            self._in_use(rec, WorkerRole.HANDED)
            return [HandWorker(self.queues.wants.popleft(), worker)]
        rec.role = WorkerRole.IDLE
        self.queues.idle.append(worker)
        return self._arm_trim()  # a spare beyond the pool at rest may retire

    def _blocked(self, worker: bytes, blocked: bool) -> list[Action]:
        rec = self.workers.get(worker)
        if rec is None or rec.role is not WorkerRole.LEASED or rec.lease is None:
            return []
        lease = self.leases.get(rec.lease)
        if lease is None or lease.evicted:
            return []
        if blocked and not lease.lent:
            lease.lent = True
            return self._route(self.scheduler.lend(lease.lease_id))
        if not blocked and lease.lent:
            lease.lent = False
            self.scheduler.reclaim(lease.lease_id)
        return []

    def _worker_exited(self, worker: bytes, reason: str) -> list[Action]:
        rec = self.workers.pop(worker, None)
        if rec is None:  # died before it registered: replaced if anything waits for it
            self.supply.started()
            return self._top_up()
        prev, rec.role = rec.role, WorkerRole.DEAD
        out: list[Action] = []
        if worker in self.queues.idle:
            self.queues.idle.remove(worker)
        if prev is WorkerRole.LEASED and rec.lease is not None:
            lease = self.leases.get(rec.lease)
            if lease is not None:
                out.append(TellWorkerExited(lease.lease_id, lease.owner, worker, reason,
                                            lease.request_id))
                lease.worker = None
                out += self._release(lease)
        elif prev is WorkerRole.HANDED:
            out.append(HandedWorkerDied(worker, reason))
        return out + self._top_up(spares=True)

    # -- checks ----------------------------------------------------------------------------
    def validate(self) -> None:
        """Invariants (see `node_lease_checks.validate`); AssertionError names the first broken."""
        node_lease_checks.validate(self)

    def story(self, key: bytes | str) -> list[str]:
        """The logged events and actions that mention `key` (a lease id, worker id or owner),
        oldest first: print it when a test fails."""
        return [f"{event!r} -> {actions!r}" for event, actions in self._log
                if mentions(event, key) or any(mentions(a, key) for a in actions)]
