"""The node's membership shell: drives the SWIM core from the node's loop over tcp.

Each node advertises its free and total resources, labels and node id as membership
metadata; every change in the view becomes `scheduler.update_cluster`, and a member that
dies or leaves is reported to the node so it can fail or move what ran there.
"""

from __future__ import annotations

import logging
import math
import os
import random
from collections.abc import Callable
from typing import Any

from zmesh.core.membership import Membership, MemberState
from zmesh.core.resources import NodeResources
from zmesh.protocol.messages.membership import (
    Gossip,
    Join,
    Metadata,
    Probe,
    ProbeAck,
    ProbeRequest,
    PushPull,
)
from zmesh.runtime.loop import EventLoop
from zmesh.store.local_read import boot_id

logger = logging.getLogger("zmesh.mesh")

TOTAL_PREFIX = "total:"
NODE_ID_LABEL = "zmesh.node_id"
IPC_LABEL = "zmesh.ipc"
PID_LABEL = "zmesh.pid"
BOOT_LABEL = "zmesh.boot"  # the machine's boot id: a hint that its store files may be read here
PUBLISH_PERIOD_S = 0.1
#: how long a due membership tick waits for the messages already received to be handled
#: (a puller's inbox holds up to 4 chunks of 4 MiB, each 50-80 ms to store on a loaded
#: machine, ahead of an ack; an inbox never empty for this long delays probes as much)
TICK_MAX_WAIT_S = 0.5
#: how long a joining node waits to hear from any member before it gives up
JOIN_TIMEOUT_S = float(os.environ.get("ZMESH_JOIN_TIMEOUT_S", "10"))
#: what `zmesh node` logs for each membership change (metadata changes are not logged)
_EVENT_WORDS = {"joined": "joined the mesh", "suspect": "suspected (not answering probes)",
                "alive": "answering again", "dead": "declared dead", "left": "left the mesh"}
_MESSAGES = (Probe, ProbeAck, ProbeRequest, Gossip, Join, PushPull)


def encode_metadata(total: dict[str, float], free: dict[str, float]) -> dict[str, float]:
    """Free amounts under their own names, totals under `total:NAME`."""
    out = dict(free)
    out.update({TOTAL_PREFIX + k: v for k, v in total.items()})
    return out


def decode_metadata(meta: Metadata) -> tuple[dict[str, float], dict[str, float], dict[str, str]]:
    """(total, free, user labels) from a member's advertised metadata."""
    total = {k[len(TOTAL_PREFIX):]: v for k, v in meta.resources.items()
             if k.startswith(TOTAL_PREFIX)}
    free = {k: v for k, v in meta.resources.items() if not k.startswith(TOTAL_PREFIX)}
    labels = {k: v for k, v in meta.labels.items() if not k.startswith("zmesh.")}
    return total, free, labels


class MeshAgent:
    """Membership for one node: timers, messages, metadata, and the scheduler's view."""

    def __init__(self, loop: EventLoop, address: str, node_id: str, *,
                 total: Callable[[], dict[str, float]], free: Callable[[], dict[str, float]],
                 labels: dict[str, str], ipc_address: str, pid: int,
                 on_view: Callable[[dict[str, NodeResources]], None],
                 on_gone: Callable[[str, str, str], None],
                 rng: random.Random | None = None,
                 on_join_failed: Callable[[str], None] | None = None) -> None:
        self.loop = loop
        self._on_join_failed = on_join_failed or (lambda why: logger.error("%s", why))
        self.on_event: Callable[[str], None] | None = None  # counts membership events
        # a member we declared dead answers again (node id, address) / a member declared
        # this node dead: the node fences what the others gave up on (server.py)
        self.on_back: Callable[[str, str], None] | None = None
        self.on_declared_dead: Callable[[], None] | None = None
        self._deaths_fenced = 0
        self.address = address
        self.node_id = node_id
        self._total = total
        self._free = free
        self._on_view = on_view
        self._on_gone = on_gone
        self._labels = {**labels, NODE_ID_LABEL: node_id, IPC_LABEL: ipc_address,
                        PID_LABEL: str(pid), BOOT_LABEL: boot_id()}
        self.membership = Membership(address, resources=self._resources(), labels=self._labels,
                                     rng=rng)
        self.node_address: dict[str, str] = {node_id: address}  # node id -> tcp address
        self.node_of: dict[str, str] = {address: node_id}  # tcp address -> node id
        self.dead_nodes: dict[str, str] = {}  # node id -> why it went
        self._armed = math.inf
        self._published: dict[str, float] = {}
        self._publishing = False  # the publish timer is armed
        for cls in _MESSAGES:
            loop.on(cls, self._on_message)

    def _resources(self) -> dict[str, float]:
        return encode_metadata(self._total(), self._free())

    # -- lifecycle -------------------------------------------------------------------------
    def start(self, seeds: list[str]) -> None:
        """Join through `seeds` (tcp addresses), or start a mesh of one when there are none."""
        now = self.loop.clock()
        seeds = [s if "://" in s else f"tcp://{s}" for s in seeds]
        seeds = [s for s in seeds if s != self.address]
        if seeds:
            self._send_all(self.membership.join(now, seeds))
            self.loop.call_later(JOIN_TIMEOUT_S, lambda: self._check_joined(seeds))
        self._tick()
        self._publish()

    def _check_joined(self, seeds: list[str]) -> None:
        """A node told to join that has heard from no member gives up with a clear reason,
        rather than running on silently as a mesh of one."""
        if any(info.address != self.address for info in self.membership.members().values()):
            return
        names = ", ".join(s.removeprefix("tcp://") for s in seeds)
        self._on_join_failed(
            f"no zmesh node answered at {names} within {JOIN_TIMEOUT_S:g}s: check the address "
            "and that a node runs there (and that --token matches)")

    def leave(self) -> None:
        """Announce a graceful leave to a few members (the rest hear it by gossip)."""
        self._send_all(self.membership.leave(self.loop.clock()))

    # -- timers and messages ---------------------------------------------------------------
    def _tick(self) -> None:
        self._armed = math.inf
        self._send_all(self.membership.tick(self.loop.clock()))
        self._after()

    def _on_message(self, sender: str, msg: Any, bufs: list[Any]) -> None:
        self._send_all(self.membership.receive(self.loop.clock(), sender, msg))
        self._after()

    def _after(self) -> None:
        self._handle_events()
        if self.membership.declared_dead > self._deaths_fenced:
            self._deaths_fenced = self.membership.declared_dead
            logger.warning("this node was declared dead by the mesh (paused or cut off too "
                           "long): its workers are stopped, their work was given up on")
            if self.on_declared_dead is not None:
                self.on_declared_dead()
        deadline = self.membership.next_deadline()
        if deadline is None or deadline >= self._armed:
            return
        self._armed = deadline
        self.loop.call_later(max(0.0, deadline - self.loop.clock()), self._tick_if_due)

    def _tick_if_due(self) -> None:
        if self.loop.clock() >= self._armed - 1e-4 or self._armed == math.inf:
            # Its verdicts (an ack missed, a suspicion run out) must see what came while
            # the loop was busy: a timer runs before the messages queued meanwhile, and an
            # ack waiting behind a few chunks got its member suspected.
            self.loop.call_when_idle(self._tick, TICK_MAX_WAIT_S)

    def _send_all(self, out: list[tuple[str, Any]]) -> None:
        for to, msg in out:
            self.loop.send(to, msg)

    def _publish(self) -> None:
        """Advertise free resources when they changed (at most every PUBLISH_PERIOD_S),
        while there is another member to tell: a node alone stops checking until one
        joins (`_handle_events` starts it again, and the joiner hears the current state)."""
        self._publishing = False
        if not self.membership.has_peers():
            return
        res = self._resources()
        if res != self._published:
            self._published = res
            self.membership.set_metadata(resources=res)
            self._after()
        self._publishing = True
        self.loop.call_later(PUBLISH_PERIOD_S, self._publish)

    # -- the view --------------------------------------------------------------------------
    def _handle_events(self) -> None:
        events = self.membership.drain_events()
        if not events:
            return
        gone: list[tuple[str, str, str]] = []
        back: list[tuple[str, str]] = []
        for ev in events:
            node_id = ev.metadata.labels.get(NODE_ID_LABEL, "")
            if node_id:
                self.node_address[node_id] = ev.address
                self.node_of[ev.address] = node_id
            if self.on_event is not None:
                self.on_event(ev.kind.value)
            if node_id and node_id != self.node_id and ev.kind.value in _EVENT_WORDS:
                logger.info("member %s at %s: %s", node_id[:12],
                            ev.address.removeprefix("tcp://"), _EVENT_WORDS[ev.kind.value])
            if ev.kind.value in ("dead", "left") and node_id:
                why = "left the mesh" if ev.kind.value == "left" else "died"
                self.dead_nodes[node_id] = why
                gone.append((node_id, ev.address, why))
            elif ev.kind.value in ("joined", "alive") and node_id \
                    and self.dead_nodes.pop(node_id, None) is not None:
                back.append((node_id, ev.address))
        if not self._publishing and self.membership.has_peers():
            self._publishing = True
            self.loop.call_soon(self._publish)
        self._on_view(self.view())
        for node_id, address, why in gone:
            self._on_gone(node_id, address, why)
        for node_id, address in back:
            if self.on_back is not None:
                self.on_back(node_id, address)

    def view(self) -> dict[str, NodeResources]:
        """Every live member but this node, as the scheduler wants it."""
        out: dict[str, NodeResources] = {}
        for info in self.membership.members().values():
            if info.address == self.address or not info.is_live:
                continue
            node_id = info.metadata.labels.get(NODE_ID_LABEL)
            if not node_id:
                continue
            total, free, labels = decode_metadata(info.metadata)
            out[node_id] = NodeResources.of(total, free, labels)
        return out

    def live_address(self, node_id: str) -> str | None:
        """The tcp address of a live member, or None."""
        address = self.node_address.get(node_id)
        if address is None or node_id in self.dead_nodes:
            return None
        return address

    def describe(self) -> list[dict[str, Any]]:
        """Every member this node knows, for `nodes()` and `zmesh status`."""
        rows = []
        for info in self.membership.members().values():
            total, free, labels = decode_metadata(info.metadata)
            if info.address == self.address:
                total, free = self._total(), self._free()
            node_id = info.metadata.labels.get(NODE_ID_LABEL, "")
            host = info.address.split("://", 1)[-1].rsplit(":", 1)[0]
            rows.append({
                "NodeID": node_id, "Alive": info.is_live, "alive": info.is_live,
                "State": MemberState(info.state).name.lower(),
                "NodeManagerAddress": host, "Address": info.address,
                "IpcAddress": info.metadata.labels.get(IPC_LABEL, ""),
                "Pid": int(info.metadata.labels.get(PID_LABEL, "0") or 0),
                "Resources": total, "Available": free, "Labels": labels,
                "Incarnation": info.incarnation,
            })
        return sorted(rows, key=lambda r: (r["Address"] != self.address, r["Address"]))
