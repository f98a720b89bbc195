"""Work that crosses nodes: forwarded leases and actors, and what a node's death does to them.

The node that first took a lease request (its origin) chooses the lease id and keeps a
record while another node holds the lease, so that the owner's `ReturnLease` (always sent
to its own node) reaches the right node, and so that a holder's death fails the lease
(`WorkerExited`: the owner retries its tasks elsewhere) or, if none was granted yet,
schedules the request again. An actor's first node stays its home: it answers lookups
and relays the state changes the hosting node reports to the owner and subscribers.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

import msgspec

from zmesh.core.scheduling import Forward
from zmesh.protocol.messages import placement as p
from zmesh.protocol.messages import runtime as m
from zmesh.runtime.node.actor_entries import ActorEntry
from zmesh.runtime.node.lease_table import LeaseInfo

if TYPE_CHECKING:
    from zmesh.runtime.node.server import Node

logger = logging.getLogger("zmesh.node")

PASSED_ON_LIMIT = 4096  # leases remembered after passing them on


class Forwarder:
    """Carries out `Forward` decisions and answers the other nodes (loop thread only)."""

    def __init__(self, node: Node) -> None:
        self.node = node
        # Leases this node passed on to another (lease id -> where): a return that reaches
        # us before the origin learned where the lease was granted follows it (bounded).
        self.passed_on: OrderedDict[bytes, str] = OrderedDict()
        # Leases other nodes forwarded here (bounded): a duplicated ForwardLease is ignored,
        # not placed a second time (that failed the task with "already submitted").
        self.taken: OrderedDict[tuple[bytes, int], None] = OrderedDict()
        loop = node.loop
        loop.on(p.ForwardLease, self._on_forward_lease)
        loop.on(p.ForwardedLeaseState, self._on_lease_state)
        loop.on(p.ForwardActor, self._on_forward_actor)

    # -- sending work away -----------------------------------------------------------------
    def forward(self, d: Forward) -> None:
        node = self.node
        address = node.mesh.live_address(d.node_id) if node.mesh is not None else None
        lease = node.leases.get(d.work_id)
        if address is None:  # the view moved on; place it again here
            logger.info("forward of %s to %s: node is gone; rescheduling", d.work_id.hex(),
                        d.node_id)
            if lease is not None:
                node.submit_lease(lease, hops=d.request.hops)
            else:
                entry = node.actors.actors.get(d.work_id)
                if entry is not None:
                    entry.hops = d.request.hops
                    node.actors.schedule(entry)
            return
        if lease is not None:
            self._forward_lease(lease, address, d.request.hops)
            return
        entry = node.actors.actors.get(d.work_id)
        if entry is not None:
            self._forward_actor(entry, address, d.request.hops)

    def _forward_lease(self, lease: LeaseInfo, address: str, hops: int) -> None:
        node = self.node
        assert lease.request is not None
        origin = lease.origin or node.mesh_address
        node.loop.send(address, p.ForwardLease(lease_id=lease.lease_id, origin=origin,
                                               request=lease.request, hops=hops))
        if lease.origin:  # passing it on: the origin keeps the record, not us
            node.leases.pop(lease.lease_id, None)
            self.passed_on[lease.lease_id] = address
            while len(self.passed_on) > PASSED_ON_LIMIT:
                self.passed_on.popitem(last=False)
        else:
            lease.remote = address

    def _forward_actor(self, entry: ActorEntry, address: str, hops: int) -> None:
        spec = entry.spec
        blob = spec.fn_blob or self.node.functions.get(spec.fn_id, b"")
        entry.remote = address
        self.node.loop.send(address, p.ForwardActor(
            spec=msgspec.structs.replace(spec, fn_blob=blob), hops=hops, restarts=entry.restarts))

    # -- taking work from another node -----------------------------------------------------
    def _on_forward_lease(self, sender: str, msg: p.ForwardLease, bufs: list[Any]) -> None:
        key = (msg.lease_id, msg.hops)  # a lease may come back after more hops, not twice
        if key in self.taken:
            return
        self.taken[key] = None
        while len(self.taken) > PASSED_ON_LIMIT:
            self.taken.popitem(last=False)
        req = msg.request
        lease = LeaseInfo(msg.lease_id, req.owner, req.request_id, req.name, request=req,
                          origin=msg.origin)
        self.node.leases[msg.lease_id] = lease
        self.node.submit_lease(lease, hops=msg.hops)

    def _on_forward_actor(self, sender: str, msg: p.ForwardActor, bufs: list[Any]) -> None:
        self.node.actors.host_forwarded(msg.spec, home=sender, hops=msg.hops,
                                        restarts=msg.restarts)

    def notify_origin(self, lease: LeaseInfo, state: str) -> None:
        """Tell a forwarded lease's origin that it was granted here, or is done."""
        if lease.origin:
            worker = lease.worker.address if lease.worker is not None else ""
            self.node.loop.send(lease.origin, p.ForwardedLeaseState(
                lease_id=lease.lease_id, state=state, worker_address=worker))

    def _on_lease_state(self, sender: str, msg: p.ForwardedLeaseState, bufs: list[Any]) -> None:
        lease = self.node.leases.get(msg.lease_id)
        if lease is None or not lease.remote:
            return
        if msg.state == "granted":
            lease.remote = sender
            lease.remote_granted = True
        else:
            self.node.leases.pop(msg.lease_id, None)

    def return_passed_on(self, msg: m.ReturnLease) -> None:
        """A return for a lease we passed on: send it after the lease."""
        address = self.passed_on.pop(msg.lease_id, None)
        if address is not None:
            self.node.loop.send(address, msg)

    def return_remote(self, lease: LeaseInfo, owner_died: bool = False,
                      retire: bool = False) -> None:
        """The owner gave back a lease another node holds (or died): pass it on."""
        self.node.leases.pop(lease.lease_id, None)
        self.node.loop.send(lease.remote, m.ReturnLease(lease_id=lease.lease_id,
                                                        owner_died=owner_died, retire=retire))

    # -- a node died or left ---------------------------------------------------------------
    def node_gone(self, node_id: str, address: str, why: str) -> None:
        node = self.node
        for lease in list(node.leases.values()):
            if lease.remote == address:
                node.leases.pop(lease.lease_id, None)
                if lease.remote_granted:
                    node.loop.send(lease.owner, m.WorkerExited(
                        lease_id=lease.lease_id, worker_address="",
                        reason=f"its node {node_id} {why}"))
                else:
                    lease.remote = ""
                    node.leases[lease.lease_id] = lease
                    node.submit_lease(lease, hops=0)
            elif lease.origin == address:
                lease.origin = ""  # its owner went with that node
                node.release_lease(lease)
        node.actors.node_gone(node_id, address, why)
        node.groups.node_gone(node_id, address)
