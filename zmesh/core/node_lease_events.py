"""What the node-lease core (`zmesh.core.node_leases`) takes in and gives out: typed events
(protocol messages, process exits, peer deaths, timers) and actions for the node's shell."""

from __future__ import annotations

from typing import Any, Union

import msgspec

from zmesh.core.scheduling import Decision, Request

SIGTERM, SIGKILL = 15, 9

__all__ = [
    "LeaseRequested",
    "LeaseReturned",
    "WorkerStarted",
    "WorkerExited",
    "WorkerBlocked",
    "WorkerWanted",
    "WorkerGivenBack",
    "OwnerDied",
    "PeerDied",
    "RemoteLeaseState",
    "ForwardSent",
    "ForwardFailed",
    "ForwardRepeated",
    "LeaseEvicted",
    "Scheduled",
    "Timer",
    "NodeStopping",
    "PrestartWorkers",
    "Grant",
    "RefuseLease",
    "LeaseDone",
    "TellWorkerExited",
    "Revoke",
    "Warn",
    "SpawnWorker",
    "KillWorker",
    "RetireWorker",
    "HandWorker",
    "HandedWorkerDied",
    "SetTimer",
    "ForwardLease",
    "ReturnToRemote",
    "FollowPassedOn",
    "PassedOn",
    "Decided",
    "TellOrigin",
    "Event",
    "Action",
    "SIGTERM",
    "SIGKILL",
]


# -- events ----------------------------------------------------------------------------------
class LeaseRequested(msgspec.Struct, frozen=True):
    """An owner asked this node for a worker (`origin`: another node forwarded the request)."""

    lease_id: bytes
    owner: str
    request_id: int
    name: str
    request: Request
    payload: Any = None
    origin: str = ""


class LeaseReturned(msgspec.Struct, frozen=True):
    """The owner gave a lease back (`owner_died`: its worker must stop; `retire`: max_calls)."""

    lease_id: bytes
    owner_died: bool = False
    retire: bool = False


class PrestartWorkers(msgspec.Struct, frozen=True):
    """The node starts `count` workers ahead of demand (once, as it starts)."""

    count: int


class WorkerStarted(msgspec.Struct, frozen=True):
    """A worker process registered and can take work."""

    worker: bytes


class WorkerExited(msgspec.Struct, frozen=True):
    worker: bytes
    reason: str


class WorkerBlocked(msgspec.Struct, frozen=True):
    """A leased worker blocks in get/wait (`blocked`) or resumes."""

    worker: bytes
    blocked: bool


class WorkerWanted(msgspec.Struct, frozen=True):
    """The actor shell wants a worker for `token` (answered by HandWorker)."""

    token: int


class WorkerGivenBack(msgspec.Struct, frozen=True):
    """A worker handed out that was not used (its actor died before it started)."""

    worker: bytes


class OwnerDied(msgspec.Struct, frozen=True):
    """A driver or worker that may hold leases here is gone."""

    owner: str


class PeerDied(msgspec.Struct, frozen=True):
    """Another node died or left: leases forwarded to it or from it are settled."""

    address: str
    node_id: str
    why: str


class RemoteLeaseState(msgspec.Struct, frozen=True):
    """The node a lease was forwarded to says it granted it (`granted`) or is done with it;
    `unknown`: asked again, it has no record of it (it dropped it, e.g. when it wrongly took
    this node for dead, or passed it on to a node that died), so nobody may ever answer the
    owner: the origin places it again."""

    lease_id: bytes
    sender: str
    granted: bool
    unknown: bool = False


class ForwardSent(msgspec.Struct, frozen=True):
    """The shell sent a ForwardLease to `address`."""

    lease_id: bytes
    address: str


class ForwardFailed(msgspec.Struct, frozen=True):
    """The node chosen for a forward is gone from the view: place it again here."""

    lease_id: bytes
    hops: int


class ForwardRepeated(msgspec.Struct, frozen=True):
    """Origin node `origin` sent again a lease it forwarded here (it heard nothing back):
    say again what became of it."""

    lease_id: bytes
    origin: str


class LeaseEvicted(msgspec.Struct, frozen=True):
    """Its placement group was removed: the scheduler already freed it; its worker dies."""

    lease_id: bytes


class Scheduled(msgspec.Struct, frozen=True):
    """Decisions of the scheduler made elsewhere (actors, groups, gossip) to route."""

    decisions: tuple[Decision, ...]


class Timer(msgspec.Struct, frozen=True):
    """A timer set by SetTimer fired."""

    key: tuple[str, bytes]


class NodeStopping(msgspec.Struct, frozen=True):
    """The node shuts down: workers that exit are not replaced."""


Event = Union[LeaseRequested, LeaseReturned, WorkerStarted, WorkerExited, WorkerBlocked,
              WorkerWanted, WorkerGivenBack, OwnerDied, PeerDied, RemoteLeaseState,
              ForwardSent, ForwardFailed, ForwardRepeated, LeaseEvicted, Scheduled, Timer,
              NodeStopping, PrestartWorkers]


# -- actions ---------------------------------------------------------------------------------
class Grant(msgspec.Struct, frozen=True):
    """Tell the owner its lease runs on `worker` (and the origin, if forwarded)."""

    lease_id: bytes
    owner: str
    request_id: int
    worker: bytes
    gpu_ids: tuple[int, ...]
    origin: str


class RefuseLease(msgspec.Struct, frozen=True):
    """Tell the owner its request failed with `error` (and the origin that it is done)."""

    lease_id: bytes
    owner: str
    request_id: int
    error: BaseException
    origin: str


class LeaseDone(msgspec.Struct, frozen=True):
    """Tell a forwarded lease's origin that it is done here."""

    lease_id: bytes
    origin: str


class TellWorkerExited(msgspec.Struct, frozen=True):
    """Tell the owner its lease's worker (or the node holding it) died; `request_id` is the
    owner's request the lease answered."""

    lease_id: bytes
    owner: str
    worker: bytes | None
    reason: str
    request_id: int = -1


class Revoke(msgspec.Struct, frozen=True):
    """Ask an owner to give back an idle lease: someone else's work waits."""

    lease_id: bytes
    owner: str


class Warn(msgspec.Struct, frozen=True):
    """Tell the owner its lease cannot be scheduled anywhere yet."""

    owner: str
    subject: str
    text: str


class SpawnWorker(msgspec.Struct, frozen=True):
    """Start one more worker process."""


class KillWorker(msgspec.Struct, frozen=True):
    worker: bytes
    sig: int


class RetireWorker(msgspec.Struct, frozen=True):
    """Tell an idle worker to exit: it ran its max_calls, or it is a spare beyond the pool."""

    worker: bytes
    reason: str = "max_calls reached"


class HandWorker(msgspec.Struct, frozen=True):
    """Give `worker` to the actor shell's `token`."""

    token: int
    worker: bytes


class HandedWorkerDied(msgspec.Struct, frozen=True):
    """A worker given to the actor shell died."""

    worker: bytes
    reason: str


class SetTimer(msgspec.Struct, frozen=True):
    delay: float
    key: tuple[str, bytes]


class ForwardLease(msgspec.Struct, frozen=True):
    """Send the lease request to node `node_id` (the shell answers ForwardSent/Failed)."""

    lease_id: bytes
    node_id: str
    hops: int
    origin: str
    payload: Any


class ReturnToRemote(msgspec.Struct, frozen=True):
    """Pass a return on to the node holding a lease we forwarded."""

    lease_id: bytes
    remote: str
    owner_died: bool
    retire: bool


class FollowPassedOn(msgspec.Struct, frozen=True):
    """A return for a lease we do not hold: send it after it, if we passed it on."""

    lease_id: bytes
    owner_died: bool
    retire: bool


class PassedOn(msgspec.Struct, frozen=True):
    """We forwarded a lease that was forwarded to us: remember where it went."""

    lease_id: bytes
    address: str


class TellOrigin(msgspec.Struct, frozen=True):
    """Tell the lease's origin node where it stands: granted to `worker`, or (None) done;
    `unknown`: this node has no record of it (see RemoteLeaseState)."""

    lease_id: bytes
    origin: str
    worker: bytes | None
    unknown: bool = False


class Decided(msgspec.Struct, frozen=True):
    """A scheduler decision that is not about a lease (actors, groups): route it on."""

    decision: Decision


Action = Union[Grant, RefuseLease, LeaseDone, TellWorkerExited, Revoke, Warn, SpawnWorker,
               KillWorker, RetireWorker, HandWorker, HandedWorkerDied, SetTimer, ForwardLease,
               ReturnToRemote, FollowPassedOn, PassedOn, Decided, TellOrigin]
