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
from collections.abc import Callable
from typing import Any

import msgspec

from zmesh.core import node_lease_events as nl
from zmesh.core.scheduling import Forward
from zmesh.protocol.messages import placement as p
from zmesh.protocol.messages import runtime as m
from zmesh.runtime.node.actor_entries import ActorEntry

logger = logging.getLogger("zmesh.node")

PASSED_ON_LIMIT = 4096  # leases remembered after passing them on


class ForwardPorts(msgspec.Struct, frozen=True):
    """What the forwarder may do to the rest of its node (no `Node` of its own)."""

    send: Callable[[str, Any], Any]  # (address, message)
    on: Callable[[type[Any], Callable[[str, Any, list[Any]], None]], Any]  # register a handler
    own_address: str  # this node's mesh address (a lease's origin)
    live_address: Callable[[str], str | None]  # node id -> its address while it is alive
    function_blob: Callable[[bytes], bytes]  # a function id -> its pickled body (b"" unknown)
    actor_entry: Callable[[bytes], ActorEntry | None]  # an actor this node homes
    schedule_actor: Callable[[ActorEntry], None]  # place it again here
    host_actor: Callable[..., None]  # (spec, *, home, hops, restarts): run one sent here
    lease_request: Callable[..., None]  # (lease_id, request, *, origin, hops)
    lease_event: Callable[[nl.Event], None]  # an event for the node-lease core
    actors_node_gone: Callable[[str, str, str], None]  # (node id, address, why)
    groups_node_gone: Callable[[str, str], None]  # (node id, address)


class Forwarder:
    """Carries out `Forward` decisions and answers the other nodes (loop thread only)."""

    def __init__(self, ports: ForwardPorts) -> None:
        self.ports = ports
        # Leases this node passed on to another (lease id -> where): a return that reaches
        # us before the origin learned where the lease was granted follows it (bounded).
        self.passed_on: OrderedDict[bytes, str] = OrderedDict()
        # Leases other nodes forwarded here (bounded): a duplicated ForwardLease is ignored,
        # not placed a second time (that failed the task with "already submitted").
        self.taken: OrderedDict[tuple[bytes, int], None] = OrderedDict()
        ports.on(p.ForwardLease, self._on_forward_lease)
        ports.on(p.ForwardedLeaseState, self._on_lease_state)
        ports.on(p.ForwardActor, self._on_forward_actor)

    # -- sending work away -----------------------------------------------------------------
    def forward(self, d: Forward) -> None:
        """Send an actor to the node the scheduler chose (leases go through `send_lease`)."""
        ports = self.ports
        address = ports.live_address(d.node_id)
        entry = ports.actor_entry(d.work_id)
        if entry is None:
            return
        if address is None:  # the view moved on; place it again here
            logger.info("forward of actor %s to %s: node is gone; rescheduling",
                        d.work_id.hex(), d.node_id)
            entry.hops = d.request.hops
            ports.schedule_actor(entry)
            return
        self._forward_actor(entry, address, d.request.hops)

    def send_lease(self, action: nl.ForwardLease) -> str | None:
        """Send a lease request on to node `action.node_id`: its address, or None if gone."""
        ports = self.ports
        address = ports.live_address(action.node_id)
        if address is None:
            logger.info("forward of lease %s to %s: node is gone; rescheduling",
                        action.lease_id.hex(), action.node_id)
            return None
        ports.send(address, p.ForwardLease(
            lease_id=action.lease_id, origin=action.origin or ports.own_address,
            request=action.payload, hops=action.hops))
        return address

    def note_passed_on(self, lease_id: bytes, address: str) -> None:
        """We passed on a lease another node forwarded to us: remember where (bounded)."""
        self.passed_on[lease_id] = address
        while len(self.passed_on) > PASSED_ON_LIMIT:
            self.passed_on.popitem(last=False)

    def resend_actor(self, entry: ActorEntry) -> None:
        """Send a forwarded actor to its host again (it heard nothing back)."""
        self._forward_actor(entry, entry.remote, entry.hops)

    def _forward_actor(self, entry: ActorEntry, address: str, hops: int) -> None:
        spec = entry.spec
        blob = spec.fn_blob or self.ports.function_blob(spec.fn_id)
        entry.remote = address
        self.ports.send(address, p.ForwardActor(
            spec=msgspec.structs.replace(spec, fn_blob=blob), hops=hops, restarts=entry.restarts))

    # -- taking work from another node -----------------------------------------------------
    def _on_forward_lease(self, sender: str, msg: p.ForwardLease, bufs: list[Any]) -> None:
        key = (msg.lease_id, msg.hops)  # a lease may come back after more hops, not twice
        if key in self.taken:  # sent again: its origin heard nothing back
            ahead = self.passed_on.get(msg.lease_id)
            if ahead is not None:
                self.ports.send(ahead, msg)
            else:
                self.ports.lease_event(nl.ForwardRepeated(msg.lease_id, msg.origin))
            return
        self.taken[key] = None
        while len(self.taken) > PASSED_ON_LIMIT:
            self.taken.popitem(last=False)
        self.ports.lease_request(msg.lease_id, msg.request, origin=msg.origin, hops=msg.hops)

    def _on_forward_actor(self, sender: str, msg: p.ForwardActor, bufs: list[Any]) -> None:
        self.ports.host_actor(msg.spec, home=sender, hops=msg.hops, restarts=msg.restarts)

    def _on_lease_state(self, sender: str, msg: p.ForwardedLeaseState, bufs: list[Any]) -> None:
        self.ports.lease_event(nl.RemoteLeaseState(msg.lease_id, sender,
                                                   granted=msg.state == "granted",
                                                   unknown=msg.state == "unknown"))

    def return_passed_on(self, msg: m.ReturnLease) -> None:
        """A return for a lease we passed on: send it after the lease."""
        address = self.passed_on.pop(msg.lease_id, None)
        if address is not None:
            self.ports.send(address, msg)

    # -- a node died or left ---------------------------------------------------------------
    def node_gone(self, node_id: str, address: str, why: str) -> None:
        ports = self.ports
        # Leases we passed on to it went with it, granted or not: forget where they went, so
        # that the origin asking again hears that we have no record of them and places them
        # again (following them to the dead node left the owner waiting forever: chaos seed
        # 71, a node paused through a death passed a lease on to the dead node).
        for lease_id in [lid for lid, where in self.passed_on.items() if where == address]:
            del self.passed_on[lease_id]
        ports.lease_event(nl.PeerDied(address, node_id, why))
        ports.actors_node_gone(node_id, address, why)
        ports.groups_node_gone(node_id, address)
