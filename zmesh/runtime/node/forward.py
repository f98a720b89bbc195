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

from zmesh.core import node_lease_events as nl
from zmesh.core.scheduling import Forward
from zmesh.protocol.messages import placement as p
from zmesh.protocol.messages import runtime as m
from zmesh.runtime.node.actor_entries import ActorEntry

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
        """Send an actor to the node the scheduler chose (leases go through `send_lease`)."""
        node = self.node
        address = node.mesh.live_address(d.node_id) if node.mesh is not None else None
        entry = node.actors.actors.get(d.work_id)
        if entry is None:
            return
        if address is None:  # the view moved on; place it again here
            logger.info("forward of actor %s to %s: node is gone; rescheduling",
                        d.work_id.hex(), d.node_id)
            entry.hops = d.request.hops
            node.actors.schedule(entry)
            return
        self._forward_actor(entry, address, d.request.hops)

    def send_lease(self, action: nl.ForwardLease) -> str | None:
        """Send a lease request on to node `action.node_id`: its address, or None if gone."""
        node = self.node
        address = node.mesh.live_address(action.node_id) if node.mesh is not None else None
        if address is None:
            logger.info("forward of lease %s to %s: node is gone; rescheduling",
                        action.lease_id.hex(), action.node_id)
            return None
        node.loop.send(address, p.ForwardLease(
            lease_id=action.lease_id, origin=action.origin or node.mesh_address,
            request=action.payload, hops=action.hops))
        return address

    def note_passed_on(self, lease_id: bytes, address: str) -> None:
        """We passed on a lease another node forwarded to us: remember where (bounded)."""
        self.passed_on[lease_id] = address
        while len(self.passed_on) > PASSED_ON_LIMIT:
            self.passed_on.popitem(last=False)

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
        self.node.lease_shell.request(msg.lease_id, msg.request, origin=msg.origin,
                                      hops=msg.hops)

    def _on_forward_actor(self, sender: str, msg: p.ForwardActor, bufs: list[Any]) -> None:
        self.node.actors.host_forwarded(msg.spec, home=sender, hops=msg.hops,
                                        restarts=msg.restarts)

    def _on_lease_state(self, sender: str, msg: p.ForwardedLeaseState, bufs: list[Any]) -> None:
        self.node.lease_shell.handle(nl.RemoteLeaseState(msg.lease_id, sender,
                                                         granted=msg.state == "granted"))

    def return_passed_on(self, msg: m.ReturnLease) -> None:
        """A return for a lease we passed on: send it after the lease."""
        address = self.passed_on.pop(msg.lease_id, None)
        if address is not None:
            self.node.loop.send(address, msg)

    # -- a node died or left ---------------------------------------------------------------
    def node_gone(self, node_id: str, address: str, why: str) -> None:
        node = self.node
        node.lease_shell.handle(nl.PeerDied(address, node_id, why))
        node.actors.node_gone(node_id, address, why)
        node.groups.node_gone(node_id, address)
