"""Placement groups across nodes: the scheduler's two-phase reservation carried over the wire.

The node a group was created through coordinates it (`core/groups.py` decides); this module
sends its PGPrepare / PGCommit / PGAbort / PGRelease decisions to the nodes they name and
feeds their answers back into the scheduler. It also answers `LookupPlacementGroup` (work
for a group made elsewhere) by asking every live node, and releases bundles held here for a
coordinator that died, so no half-reserved group outlives a failure.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from zmesh.core.scheduling import (
    BundlesPrepared,
    LookupPlacementGroup,
    PGAbort,
    PGCommit,
    PGPrepare,
    PGReady,
    PGRelease,
    PGRemoved,
    PlacementGroupInfo,
)
from zmesh.protocol.messages import placement as p

if TYPE_CHECKING:
    from zmesh.runtime.node.server import Node

logger = logging.getLogger("zmesh.node")

RETRY_PERIOD_S = 0.5
"""How often a coordinator retries groups left pending by a refused or aborted attempt."""

LAYOUT_CHECK_S = 5.0
"""How often a node holding committed bundles of a group coordinated elsewhere asks the
coordinator for the group's layout: the word that the group was removed, or placed again
elsewhere (its coordinator took this node for dead), may have been lost, and the bundles
would be held forever."""

GROUP_DECISIONS = (PGPrepare, PGCommit, PGAbort, PGRelease, LookupPlacementGroup)


class GroupRelay:
    """Carries group decisions between nodes and answers theirs (loop thread only)."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.coordinator: dict[str, str] = {}  # pg_id -> address of the node coordinating it
        self.lookers: dict[str, set[str]] = {}  # pg_id -> nodes waiting for its layout
        self.removed: set[str] = set()
        # pg_id -> why this node may tell others the group is gone: "" when it coordinated the
        # group or heard so from its coordinator; the coordinator's address when it released
        # its part because it took that coordinator for dead (an asker that still sees the
        # coordinator alive waits for the coordinator's own answer instead)
        self.gone: dict[str, str] = {}
        self._retry_armed = False
        self._check_armed = False
        loop = node.loop
        loop.on(p.PrepareBundles, self._on_prepare)
        loop.on(p.BundlesReserved, self._on_reserved)
        loop.on(p.CommitBundles, self._on_commit)
        loop.on(p.AbortBundles, self._on_abort)
        loop.on(p.ReleaseBundles, self._on_release)
        loop.on(p.LookupGroup, self._on_lookup)
        loop.on(p.GroupLayout, self._on_layout)
        loop.on(p.BundlesLost, self._on_bundles_lost)

    # -- decisions from this node's scheduler ----------------------------------------------
    def carry_out(self, d: Any) -> None:
        """Send one cross-node group decision where it goes."""
        node = self.node
        if isinstance(d, LookupPlacementGroup):
            for peer in self.live_peers():
                node.loop.send(peer, p.LookupGroup(pg_id=d.pg_id))
            return
        address = node.mesh.live_address(d.node_id) if node.mesh is not None else None
        if isinstance(d, PGPrepare):
            if address is None:  # gone already: the attempt fails now, not at the next view
                node.apply(node.scheduler.on_bundles_prepared(BundlesPrepared(
                    d.pg_id, d.node_id, d.attempt, False, f"node {d.node_id!r} is not alive")))
                return
            node.loop.send(address, p.PrepareBundles(pg_id=d.pg_id, attempt=d.attempt,
                                                     bundles=d.bundles))
            self.arm_retry()  # asked again if no answer comes
        elif address is None:
            return  # a dead node holds nothing any more
        elif isinstance(d, PGCommit):
            node.loop.send(address, p.CommitBundles(pg_id=d.pg_id, nodes=list(d.nodes),
                                                    bundles=list(d.bundles)))
        elif isinstance(d, PGAbort):
            node.loop.send(address, p.AbortBundles(pg_id=d.pg_id))
        elif isinstance(d, PGRelease):
            node.loop.send(address, p.ReleaseBundles(pg_id=d.pg_id))

    def on_decision(self, d: Any) -> None:
        """Local group events: answer nodes that looked the group up; keep retrying."""
        if isinstance(d, PGReady):
            lookers = self.lookers.pop(d.pg_id, set())
            if d.rescheduled:  # any node may hold a stale layout: tell every live one
                lookers |= set(self.live_peers())
            for address in lookers:
                self._send_layout(address, d.pg_id)
        elif isinstance(d, PGRemoved):
            self.removed.add(d.pg_id)
            if d.coordinated:
                self.gone[d.pg_id] = ""
            for address in self.lookers.pop(d.pg_id, set()):
                self._send_layout(address, d.pg_id)
        self.arm_retry()

    def arm_retry(self) -> None:
        """While a group waits after a refused attempt, retry it periodically: gossip of the
        other nodes' free resources may never change (no event would wake it up). While an
        attempt waits for answers, ask again the nodes silent for a whole period."""
        scheduler = self.node.scheduler
        if not self._retry_armed and (scheduler.groups_preparing() or any(
                info.state in ("pending", "rescheduling")
                for info in scheduler.placement_groups())):
            self._retry_armed = True
            self.node.loop.call_later(RETRY_PERIOD_S, self._retry)

    def _retry(self) -> None:
        self._retry_armed = False
        node = self.node
        if node.stopping or node.mesh is None:
            return
        node.apply(node.scheduler.update_cluster(node.mesh.view()))
        node.apply(node.scheduler.resend_prepares())
        self.arm_retry()

    # -- messages from other nodes ---------------------------------------------------------
    def _on_prepare(self, sender: str, msg: p.PrepareBundles, bufs: list[Any]) -> None:
        node = self.node
        self.coordinator[msg.pg_id] = sender
        self._placed_again(msg.pg_id)  # its coordinator lives and places it again
        for d in node.scheduler.prepare_bundles(msg.pg_id, msg.attempt, msg.bundles):
            if isinstance(d, BundlesPrepared):
                node.loop.send(sender, p.BundlesReserved(
                    pg_id=d.pg_id, node_id=d.node_id, attempt=d.attempt, ok=d.ok,
                    reason=d.reason))
            else:
                node.apply([d])

    def _on_reserved(self, sender: str, msg: p.BundlesReserved, bufs: list[Any]) -> None:
        node = self.node
        rest = []
        for d in node.scheduler.on_bundles_prepared(BundlesPrepared(
                msg.pg_id, msg.node_id, msg.attempt, msg.ok, msg.reason)):
            if isinstance(d, PGAbort) and d.node_id == msg.node_id:
                # A stale success is released at the node that sent it, even one our view
                # takes for dead (it answered after a pause): dropped, its bundles were held
                # forever.
                node.loop.send(sender, p.AbortBundles(pg_id=d.pg_id))
            else:
                rest.append(d)
        node.apply(rest)

    def _on_commit(self, sender: str, msg: p.CommitBundles, bufs: list[Any]) -> None:
        node = self.node
        self._placed_again(msg.pg_id)
        if node.node_id in msg.nodes and not node.scheduler.holds_bundles(msg.pg_id):
            # A late commit of bundles released meanwhile (this node took the coordinator
            # for dead, or was declared dead): committing nothing, the coordinator would
            # count them as held here and their tasks would wait for good. It places them
            # again.
            logger.info("placement group %s: a commit of bundles this node released; "
                        "telling its coordinator", msg.pg_id)
            node.loop.send(sender, p.BundlesLost(pg_id=msg.pg_id, node_id=node.node_id))
            return
        self.coordinator[msg.pg_id] = sender
        node.apply(node.scheduler.commit_bundles(msg.pg_id, msg.nodes, msg.bundles))
        if not self._check_armed:
            self._check_armed = True
            node.loop.call_later(LAYOUT_CHECK_S, self._check_layouts)

    def _placed_again(self, pg_id: str) -> None:
        """Its coordinator prepares or commits the group's bundles here: if this node gave
        the group up because it took that coordinator for dead (a partition, a pause), the
        group lives after all and its work here runs (before, the scheduler kept it for
        removed and failed every task in it: 'its placement group was removed')."""
        if self.gone.pop(pg_id, ""):  # (not "": the coordinator itself removed it)
            self.removed.discard(pg_id)
            self.node.scheduler.placed_again(pg_id)

    def _check_layouts(self) -> None:
        """Ask each coordinator about the groups whose bundles this node holds for it."""
        node = self.node
        held = [(pg_id, coordinator) for pg_id, coordinator in self.coordinator.items()
                if node.scheduler.holds_bundles(pg_id)]
        self._check_armed = bool(held) and not node.stopping
        if not self._check_armed:
            return
        for pg_id, coordinator in held:
            node.loop.send(coordinator, p.LookupGroup(pg_id=pg_id))
        node.loop.call_later(LAYOUT_CHECK_S, self._check_layouts)

    def _on_abort(self, sender: str, msg: p.AbortBundles, bufs: list[Any]) -> None:
        node = self.node
        if self.coordinator.get(msg.pg_id) == sender:
            del self.coordinator[msg.pg_id]
        node.apply(node.scheduler.abort_bundles(msg.pg_id))

    def _on_release(self, sender: str, msg: p.ReleaseBundles, bufs: list[Any]) -> None:
        if self.coordinator.get(msg.pg_id, sender) == sender:
            self.gone[msg.pg_id] = ""  # the coordinator itself removed it
        self.release(msg.pg_id)

    def release(self, pg_id: str) -> None:
        """Free this node's part of a group (removed, or its coordinator is gone)."""
        node = self.node
        self.coordinator.pop(pg_id, None)
        if pg_id in self.removed and not node.scheduler.holds_bundles(pg_id):
            # Released already. Not when it holds bundles again: released because its
            # coordinator was taken for dead, then prepared again by that live coordinator
            # (its release was skipped and the bundles' CPU held forever).
            return
        node.apply(node.scheduler.remove_placement_group(pg_id))

    def _on_lookup(self, sender: str, msg: p.LookupGroup, bufs: list[Any]) -> None:
        if msg.pg_id in self.gone:
            self.node.loop.send(sender, p.GroupLayout(pg_id=msg.pg_id, state="removed",
                                                      coordinator=self.gone[msg.pg_id]))
        elif msg.pg_id in self._coordinated():
            if self._layout(msg.pg_id) is not None:
                self._send_layout(sender, msg.pg_id)
            else:
                self.lookers.setdefault(msg.pg_id, set()).add(sender)

    def _on_layout(self, sender: str, msg: p.GroupLayout, bufs: list[Any]) -> None:
        node = self.node
        if msg.state == "removed":
            if msg.coordinator and msg.coordinator in self.live_peers():
                # a node that took the group's coordinator for dead; this node sees it
                # alive, and the coordinator answers for its group itself
                return
            self.gone.setdefault(msg.pg_id, msg.coordinator)
            self.release(msg.pg_id)
        elif msg.state == "ready" and msg.pg_id not in self._coordinated():
            affected, decisions = node.scheduler.drop_stale_bundles(msg.pg_id, msg.nodes)
            for work_id in affected:
                node.actors.evict(work_id)
            node.apply(decisions)
            node.apply(node.scheduler.note_placement_group(msg.pg_id, msg.nodes, msg.bundles))

    # -- failures --------------------------------------------------------------------------
    def fence(self) -> None:
        """The mesh declared this node dead (`Node._fence`): each coordinator that had
        bundles here took them for lost and places them again. Free them here, or the
        node's resources stay held by bundles no group uses, and a group that needs this
        node again never fits (it stayed rescheduling for good). Not marked gone: the
        coordinators live."""
        node = self.node
        for pg_id, coordinator in list(self.coordinator.items()):
            logger.info("placement group %s: this node was declared dead; releasing its "
                        "bundles here (its coordinator places them again)", pg_id)
            del self.coordinator[pg_id]
            # (a coordinator that did not take us for dead, only others did, still counts
            # them as held here: tell it)
            node.loop.send(coordinator, p.BundlesLost(pg_id=pg_id, node_id=node.node_id))
            affected, decisions = node.scheduler.forget_bundles(pg_id)
            for work_id in affected:
                node.actors.evict(work_id)
            node.apply(decisions)

    def node_gone(self, node_id: str, address: str) -> None:
        """Bundles held here for a coordinator that died are released (prepared or not)."""
        for pg_id, coordinator in list(self.coordinator.items()):
            if coordinator == address:
                logger.info("placement group %s: its coordinating node %s is gone; releasing "
                            "its bundles here", pg_id, node_id)
                self.gone.setdefault(pg_id, address)
                self.release(pg_id)
        for lookers in self.lookers.values():
            lookers.discard(address)

    def node_back(self, node_id: str, address: str) -> None:
        """A coordinator we took for dead answers again: tell it which of its groups we
        released our bundles of, so it places them again (it still counted them as held
        here, and tasks into them waited for good)."""
        for pg_id, coordinator in list(self.gone.items()):
            if coordinator == address:
                self.node.loop.send(address, p.BundlesLost(pg_id=pg_id,
                                                           node_id=self.node.node_id))

    def _on_bundles_lost(self, sender: str, msg: p.BundlesLost, bufs: list[Any]) -> None:
        self.node.apply(self.node.scheduler.bundles_lost(msg.pg_id, msg.node_id))

    # -- helpers ---------------------------------------------------------------------------
    def _coordinated(self) -> dict[str, PlacementGroupInfo]:
        return {info.pg_id: info for info in self.node.scheduler.placement_groups()}

    def _layout(self, pg_id: str) -> tuple[list[str], list[dict[str, float]]] | None:
        info = self._coordinated().get(pg_id)
        if info is None or info.nodes is None:
            return None
        return list(info.nodes), [dict(b) for b in info.bundles]

    def _send_layout(self, address: str, pg_id: str) -> None:
        layout = self._layout(pg_id)
        if layout is None:
            self.node.loop.send(address, p.GroupLayout(pg_id=pg_id, state="removed"))
        else:
            self.node.loop.send(address, p.GroupLayout(pg_id=pg_id, state="ready",
                                                       nodes=layout[0], bundles=layout[1]))

    def live_peers(self) -> list[str]:
        """The tcp addresses of every other live member."""
        mesh = self.node.mesh
        if mesh is None:
            return []
        return [a for nid, a in mesh.node_address.items()
                if nid != self.node.node_id and nid not in mesh.dead_nodes]
