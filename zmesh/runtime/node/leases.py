"""The node's lease shell: protocol messages and process exits in, the node-lease core's
actions carried out through narrow ports (send, spawn, kill, timer, and the hand-offs to
the actor and forwarding shells). Every decision is in `zmesh.core.node_leases`."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import msgspec

from zmesh.core import lease_records, node_leases
from zmesh.core import node_lease_events as nl
from zmesh.core.exhaustive import assert_never
from zmesh.core.scheduler import LocalScheduler
from zmesh.core.scheduling import Decision, Request
from zmesh.protocol.messages import placement as p
from zmesh.protocol.messages import runtime as m
from zmesh.runtime import values
from zmesh.runtime.ids import random_id
from zmesh.runtime.loop import EventLoop
from zmesh.runtime.node.worker_pool import WorkerInfo
from zmesh.runtime.strategies import decode_strategy


class LeasePorts(msgspec.Struct, frozen=True):
    """What the lease shell may do to the world, and nothing else."""

    send: Callable[..., Any]  # (address, message)
    spawn: Callable[[], WorkerInfo]
    kill: Callable[[WorkerInfo, int], None]
    set_timer: Callable[[float, Callable[[], None]], Any]
    decided: Callable[[Decision], None]  # scheduler decisions for actors and groups
    actor_worker_died: Callable[[WorkerInfo, str], None]
    send_lease: Callable[[nl.ForwardLease], str | None]  # the peer's address, None: gone
    passed_on: Callable[[bytes, str], None]
    follow_passed_on: Callable[[m.ReturnLease], None]
    warn: Callable[[str | None, str, str], None]
    count_submitted: Callable[[str], None]


class LeaseShell:
    """Runs the node-lease core (loop thread only)."""

    def __init__(self, scheduler: LocalScheduler, ports: LeasePorts) -> None:
        self.core = node_leases.NodeLeases(scheduler)
        self.ports = ports
        self.infos: dict[bytes, WorkerInfo] = {}  # worker id -> its process, while it lives
        self.by_address: dict[str, WorkerInfo] = {}
        self._waiters: dict[int, Callable[[WorkerInfo], None]] = {}
        self._tokens = itertools.count()

    def register(self, loop: EventLoop) -> None:
        loop.on(m.RequestLease, self._on_request_lease)
        loop.on(m.ReturnLease, lambda s, msg, b: self.handle(nl.LeaseReturned(
            msg.lease_id, owner_died=msg.owner_died, retire=msg.retire)))
        loop.on(m.Blocked, self._on_blocked)

    @property
    def leases(self) -> dict[bytes, lease_records.Lease]:
        return self.core.leases

    def idle_count(self) -> int:
        return self.core.idle_count()

    def handle(self, event: nl.Event) -> None:
        self.run(self.core.handle(event))

    # -- inputs ----------------------------------------------------------------------------
    def _on_request_lease(self, sender: str, msg: m.RequestLease, bufs: list[Any]) -> None:
        self.ports.count_submitted(msg.name)
        self.request(random_id(12), msg, origin="", hops=0)

    def request(self, lease_id: bytes, msg: m.RequestLease, *, origin: str, hops: int) -> None:
        """A lease request from an owner here, or forwarded by node `origin`."""
        try:
            # The owner sent the task's resources with Ray's defaults applied (options.py):
            # {} is a zero-CPU task and must stay one.
            req = Request(lease_id, "task", msg.resources, strategy=decode_strategy(msg.strategy),
                          labels=msg.labels, name=msg.name, hops=hops)
        except Exception as exc:  # a bad strategy: fail the request clearly
            self._refuse(nl.RefuseLease(lease_id, msg.owner, msg.request_id, exc, origin))
            return
        self.handle(nl.LeaseRequested(lease_id, msg.owner, msg.request_id, msg.name, req,
                                      payload=msg, origin=origin))

    def _on_blocked(self, sender: str, msg: m.Blocked, bufs: list[Any]) -> None:
        info = self.by_address.get(msg.worker)
        if info is not None:
            self.handle(nl.WorkerBlocked(info.worker_id, msg.blocked))

    def worker_ready(self, info: WorkerInfo) -> None:
        """A worker registered (its address and pid are known now)."""
        self.infos[info.worker_id] = info
        self.by_address[info.address] = info
        if info.state == "starting":
            info.state = "idle"
        self.handle(nl.WorkerStarted(info.worker_id))

    def worker_exited(self, info: WorkerInfo, reason: str) -> None:
        """Its process exited (`reason` as describe_status words it)."""
        self.by_address.pop(info.address, None)
        self.run(self.core.handle(nl.WorkerExited(info.worker_id, reason)))
        self.infos.pop(info.worker_id, None)

    def take_worker(self, waiter: Callable[[WorkerInfo], None]) -> None:
        """Hand an idle worker to `waiter(info)`, starting one if none is idle."""
        token = next(self._tokens)
        self._waiters[token] = waiter
        self.handle(nl.WorkerWanted(token))

    def give_back(self, info: WorkerInfo) -> None:
        """A worker from `take_worker` that was not used."""
        self.handle(nl.WorkerGivenBack(info.worker_id))

    # -- actions ---------------------------------------------------------------------------
    def run(self, actions: list[nl.Action]) -> None:
        ports = self.ports
        info: WorkerInfo | None
        address: str | None
        for action in actions:
            match action:
                case nl.Grant():
                    info = self.infos[action.worker]
                    info.state, info.lease_id = "leased", action.lease_id
                    ports.send(action.owner, m.LeaseGranted(
                        request_id=action.request_id, lease_id=action.lease_id,
                        worker_address=info.address, gpu_ids=list(action.gpu_ids)))
                    if action.origin:
                        ports.send(action.origin, p.ForwardedLeaseState(
                            lease_id=action.lease_id, state="granted",
                            worker_address=info.address))
                case nl.RefuseLease():
                    self._refuse(action)
                case nl.LeaseDone():
                    ports.send(action.origin, p.ForwardedLeaseState(
                        lease_id=action.lease_id, state="done", worker_address=""))
                case nl.TellWorkerExited():
                    gone = self.infos.get(action.worker) if action.worker else None
                    address = gone.address if gone is not None else ""
                    reason = f"worker pid={gone.pid} {action.reason}" if gone else action.reason
                    ports.send(action.owner, m.WorkerExited(
                        lease_id=action.lease_id, worker_address=address, reason=reason,
                        request_id=action.request_id))
                case nl.Revoke():
                    ports.send(action.owner, m.RevokeLease(lease_id=action.lease_id))
                case nl.Warn():
                    ports.warn(action.owner, action.subject, action.text)
                case nl.SpawnWorker():
                    ports.spawn()
                case nl.KillWorker():
                    info = self.infos.get(action.worker)
                    if info is not None:
                        if action.sig == nl.SIGTERM:
                            info.state, info.lease_id = "stopping", b""
                        ports.kill(info, action.sig)
                case nl.RetireWorker():
                    info = self.infos[action.worker]
                    info.state, info.lease_id = "retired", b""
                    ports.send(info.address, m.Shutdown(reason=action.reason))
                case nl.HandWorker():
                    self._waiters.pop(action.token)(self.infos[action.worker])
                case nl.HandedWorkerDied():
                    info = self.infos[action.worker]
                    reason = action.reason
                    ports.actor_worker_died(info, f"its worker (pid={info.pid}) was {reason}"
                                            if "signal" in reason else
                                            f"its worker (pid={info.pid}) {reason}")
                case nl.SetTimer():
                    ports.set_timer(action.delay, self._timer(action.key))
                case nl.ForwardLease():
                    address = ports.send_lease(action)
                    self.handle(nl.ForwardFailed(action.lease_id, action.hops) if address is None
                                else nl.ForwardSent(action.lease_id, address))
                case nl.ReturnToRemote():
                    ports.send(action.remote, m.ReturnLease(
                        lease_id=action.lease_id, owner_died=action.owner_died,
                        retire=action.retire))
                case nl.FollowPassedOn():
                    ports.follow_passed_on(m.ReturnLease(
                        lease_id=action.lease_id, owner_died=action.owner_died,
                        retire=action.retire))
                case nl.PassedOn():
                    ports.passed_on(action.lease_id, action.address)
                case nl.Decided():
                    ports.decided(action.decision)
                case nl.TellOrigin():
                    info = self.infos.get(action.worker) if action.worker else None
                    state = "granted" if info else "unknown" if action.unknown else "done"
                    ports.send(action.origin, p.ForwardedLeaseState(
                        lease_id=action.lease_id, state=state,
                        worker_address=info.address if info else ""))
                case _:
                    assert_never(action)

    def _timer(self, key: tuple[str, bytes]) -> Callable[[], None]:
        return lambda: self.handle(nl.Timer(key))

    def _refuse(self, action: nl.RefuseLease) -> None:
        self.ports.send(action.owner, m.LeaseFailed(
            request_id=action.request_id, error=values.encode_error(action.error).data))
        if action.origin:
            self.ports.send(action.origin, p.ForwardedLeaseState(
                lease_id=action.lease_id, state="done", worker_address=""))
