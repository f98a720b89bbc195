"""The placement-group half of the per-node scheduler (`zmesh.core.scheduler`): creating,
preparing, committing and removing groups, and routing work that targets a bundle.

A base class of `LocalScheduler` rather than a separate object because both halves share one
set of books (free resources, running work, the wait queues): a bundle is carved out of the
node's free resources and work in a bundle runs next to work outside any.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from zmesh.core.bundles import BundleTable
from zmesh.core.cluster_view import ClusterView
from zmesh.core.gpu_ids import GpuIdPool
from zmesh.core.groups import GroupCoordinator
from zmesh.core.placement import validate_bundles
from zmesh.core.resources import (
    SCALE,
    NodeResources,
    ResourceSet,
    explain_shortfall,
    format_amounts,
)
from zmesh.core.scheduling import (
    BundlesPrepared,
    Decision,
    Dispatch,
    Failed,
    Forward,
    Infeasible,
    LookupPlacementGroup,
    NodeId,
    Pending,
    PGReady,
    PGRelease,
    PGRemoved,
    PlacementGroupId,
    PlacementGroupTarget,
    Request,
    WorkId,
)
from zmesh.core.wait_queue import QueuedWork, Target, WaitQueues
from zmesh.errors import ActorUnschedulableError, TaskUnschedulableError, ZmeshError


class Running:
    """What a running piece of work holds and where it goes back to."""

    __slots__ = ("hold", "free", "pool", "gpu_ids", "bundle", "lent")

    def __init__(
        self,
        hold: ResourceSet,
        free: dict[str, int],
        pool: GpuIdPool | None,
        gpu_ids: tuple[int, ...],
        bundle: tuple[PlacementGroupId, int] | None,
    ) -> None:
        self.hold = hold
        self.free = free
        self.pool = pool
        self.gpu_ids = gpu_ids
        self.bundle = bundle
        self.lent = 0  # CPU (fixed point) given back while the work blocks in get/wait


def unschedulable(req: Request, message: str) -> ZmeshError:
    cls = ActorUnschedulableError if req.kind == "actor" else TaskUnschedulableError
    return cls(f"{req.describe()} cannot be scheduled: {message}")



class GroupScheduling:
    """Placement groups for `LocalScheduler`, which holds the books named below and the
    routing primitives this half calls back into."""

    node_id: NodeId
    _free: dict[str, int]
    _gpus: GpuIdPool
    _bundles: BundleTable
    _cluster: ClusterView
    _running: dict[WorkId, Running]
    _waiting: WaitQueues
    _infeasible: dict[WorkId, QueuedWork]
    _evicted: set[WorkId]
    _groups: GroupCoordinator
    _layouts: dict[PlacementGroupId, tuple[tuple[NodeId, ResourceSet], ...]]
    _removed_pgs: set[PlacementGroupId]

    # Provided by LocalScheduler.
    def snapshot(self) -> NodeResources:
        raise NotImplementedError

    def _route(self, work: QueuedWork) -> list[Decision]:
        raise NotImplementedError

    def _start(
        self,
        work: QueuedWork,
        free: dict[str, int],
        pool: GpuIdPool | None,
        bundle: tuple[PlacementGroupId, int] | None,
    ) -> Dispatch:
        raise NotImplementedError

    def _forward(self, work: QueuedWork, node: NodeId, *, count: bool = True) -> Forward:
        raise NotImplementedError

    def _enqueue(self, work: QueuedWork, target: Target, reason: str = "") -> Pending:
        raise NotImplementedError

    def _start_queued(self, work: QueuedWork) -> Dispatch | None:
        raise NotImplementedError

    def _after_release(self) -> list[Decision]:
        raise NotImplementedError

    def create_placement_group(
        self,
        pg_id: PlacementGroupId,
        bundles: Sequence[Mapping[str, float] | ResourceSet],
        strategy: str = "PACK",
        name: str = "",
    ) -> list[Decision]:
        """Reserve `bundles` atomically with this node coordinating: PGReady when every bundle
        is reserved, PGPrepare for bundles on other nodes, else PGPending / PGInfeasible."""
        if pg_id in self._removed_pgs or pg_id in self._layouts:
            raise ValueError(f"placement group {pg_id!r} already exists or was removed")
        out = self._groups.create(pg_id, bundles, strategy, name, self._cluster_view())
        return out + self._after_group_change(out)

    def on_bundles_prepared(self, reply: BundlesPrepared) -> list[Decision]:
        """Another node answered this node's PGPrepare."""
        out = self._groups.on_prepared(reply, self._cluster_view())
        out += self._after_group_change(out)
        if not reply.ok and self._waiting.by_id:
            # A failed attempt released this node's part; groups retry on the next event.
            out += self._waiting.drain(self._start_queued)
        return out

    def resend_prepares(self) -> list[Decision]:
        """PGPrepare again to the nodes that have not answered for a whole period (call it
        periodically while `groups_preparing()`)."""
        return self._groups.resend_prepares()

    def groups_preparing(self) -> bool:
        return self._groups.preparing()

    def prepare_bundles(
        self, pg_id: PlacementGroupId, attempt: int, bundles: Mapping[int, Mapping[str, float]]
    ) -> list[Decision]:
        """Reserve (uncommitted) this node's part of a group coordinated elsewhere."""
        shapes = {int(i): ResourceSet.from_dict(b) for i, b in bundles.items()}
        refused = self._bundles.reserve(pg_id, shapes)
        return [BundlesPrepared(pg_id, self.node_id, attempt, refused is None, refused or "")]

    def drop_stale_bundles(
        self, pg_id: PlacementGroupId, nodes: Sequence[NodeId]
    ) -> tuple[tuple[WorkId, ...], list[Decision]]:
        """Committed bundles held here that the group's layout (bundle i on nodes[i]) places
        on other nodes: its coordinator took this node for dead and placed them again, so
        nobody would ever release them here. They are given back; returns the work running
        in them (for the shell to evict) and what the freed resources start."""
        stale = {b.index for b in self._bundles.bundles(pg_id)
                 if b.committed and (b.index >= len(nodes) or nodes[b.index] != self.node_id)}
        if not stale:
            return (), []
        affected = tuple(wid for wid, run in self._running.items()
                         if run.bundle is not None and run.bundle[0] == pg_id
                         and run.bundle[1] in stale)
        for wid in affected:
            del self._running[wid]
            self._evicted.add(wid)
        self._bundles.release_indexes(pg_id, stale)
        return affected, self._after_release()

    def forget_bundles(
        self, pg_id: PlacementGroupId
    ) -> tuple[tuple[WorkId, ...], list[Decision]]:
        """Give back every bundle of a group coordinated elsewhere held here (committed or
        only prepared) and forget its layout, without taking the group for removed: the
        mesh declared this node dead, and the group's coordinator took the bundles for lost
        and places them again (here too, maybe: its commit brings the layout back). Returns
        the work running in them (for the shell to evict) and what the freed resources
        start."""
        affected = tuple(wid for wid, run in self._running.items()
                         if run.bundle is not None and run.bundle[0] == pg_id)
        for wid in affected:
            del self._running[wid]
            self._evicted.add(wid)
        self._bundles.release(pg_id)
        self._layouts.pop(pg_id, None)
        return affected, self._after_release()

    def bundles_lost(self, pg_id: PlacementGroupId, node_id: NodeId) -> list[Decision]:
        """A node released its bundles of a group coordinated here while it took this node
        for dead (`GroupCoordinator.bundles_lost`); the group is placed again."""
        return self._groups.bundles_lost(pg_id, node_id) + self._place_groups(
            infeasible_too=False)

    def placed_again(self, pg_id: PlacementGroupId) -> None:
        """A group this node took for removed (it took its coordinator for dead) is placed
        again by that coordinator, alive after all: its work is routed again, not failed."""
        self._removed_pgs.discard(pg_id)

    def holds_bundles(self, pg_id: PlacementGroupId) -> bool:
        """Whether this node holds bundles of the group (reserved or committed)."""
        return self._bundles.has(pg_id)

    def commit_bundles(
        self,
        pg_id: PlacementGroupId,
        nodes: Sequence[NodeId],
        bundles: Sequence[Mapping[str, float]],
    ) -> list[Decision]:
        """The coordinator saw every node prepare: this node's bundles are now usable."""
        self._bundles.commit(pg_id)
        return self.note_placement_group(pg_id, nodes, bundles)

    def abort_bundles(self, pg_id: PlacementGroupId) -> list[Decision]:
        """The coordinator gave up an attempt: release what this node prepared for it."""
        self._bundles.abort(pg_id)
        return self._waiting.drain(self._start_queued) if self._waiting.by_id else []

    def note_placement_group(
        self,
        pg_id: PlacementGroupId,
        nodes: Sequence[NodeId],
        bundles: Sequence[Mapping[str, float]],
    ) -> list[Decision]:
        """Where a group made elsewhere lives (bundle i on nodes[i]); work waiting for it moves."""
        if len(nodes) != len(bundles):
            raise ValueError(f"placement group {pg_id!r}: {len(nodes)} nodes for {len(bundles)} bundles")
        shapes = validate_bundles(bundles)
        self._layouts[pg_id] = tuple(zip(nodes, shapes))
        return self._reroute_group(pg_id)

    def remove_placement_group(self, pg_id: PlacementGroupId) -> list[Decision]:
        """Release the group's bundles here; PGRemoved lists the running work to kill, work
        waiting for the group fails, and PGRelease asks the other nodes to do the same."""
        affected = tuple(
            wid for wid, run in self._running.items()
            if run.bundle is not None and run.bundle[0] == pg_id
        )
        for wid in affected:
            del self._running[wid]
            self._evicted.add(wid)
        self._bundles.release(pg_id)
        coordinated = pg_id in self._groups
        remote = self._groups.remove(pg_id)
        self._layouts.pop(pg_id, None)
        self._removed_pgs.add(pg_id)
        out: list[Decision] = [PGRemoved(pg_id, affected, coordinated)]
        out += [PGRelease(pg_id, node) for node in remote]
        doomed = self._waiting.remove_where(lambda w: _in_group(w, pg_id))
        doomed += [self._infeasible.pop(w.req.work_id) for w in list(self._infeasible.values())
                   if _in_group(w, pg_id)]
        for work in doomed:
            out.append(Failed(work.req.work_id, unschedulable(
                work.req, f"its placement group {pg_id!r} was removed")))
        out += self._after_release()
        return out

    def _cluster_view(self) -> dict[NodeId, NodeResources]:
        return self._cluster.with_self(self.snapshot())

    def _place_groups(self, *, infeasible_too: bool) -> list[Decision]:
        out = self._groups.retry(self._cluster_view(), infeasible_too=infeasible_too)
        return out + self._after_group_change(out)

    def _after_group_change(self, decisions: list[Decision]) -> list[Decision]:
        out: list[Decision] = []
        for decision in decisions:
            if isinstance(decision, PGReady):
                out += self._reroute_group(decision.pg_id)
        return out

    def _reroute_group(self, pg_id: PlacementGroupId) -> list[Decision]:
        """Route again the work that waited for a group whose layout is now known."""
        out: list[Decision] = []
        for old in self._waiting.remove_where(lambda w: _in_group(w, pg_id)):
            out += self._route(QueuedWork(old.req, old.place, old.hold, old.seq))
        return out

    def _layout(self, pg_id: PlacementGroupId) -> tuple[tuple[NodeId, ResourceSet], ...] | None:
        return self._groups.layout(pg_id) or self._layouts.get(pg_id)

    def _route_to_bundle(self, work: QueuedWork, target: PlacementGroupTarget) -> list[Decision]:
        req, pg_id, index = work.req, target.pg_id, target.bundle_index
        if pg_id in self._removed_pgs:
            return [Failed(req.work_id, unschedulable(
                req, f"its placement group {pg_id!r} was removed"))]
        layout = self._layout(pg_id)
        if layout is None:
            known = pg_id in self._groups
            why = self._groups.reason(pg_id) if known else (
                f"placement group {pg_id!r} is not known on node {self.node_id!r} yet")
            out: list[Decision] = [self._enqueue(
                work, (pg_id, index), f"{req.describe()} waits for its placement group: {why}")]
            if not known and not self._bundles.has(pg_id):
                out.append(LookupPlacementGroup(pg_id))
            return out
        if index >= len(layout):
            return [Failed(req.work_id, unschedulable(
                req, f"bundle_index {index} is out of range: placement group {pg_id!r} has "
                f"{len(layout)} bundles"))]
        candidates = range(len(layout)) if index < 0 else (index,)
        fitting = [i for i in candidates if work.place.fits_in(layout[i][1])]
        if not fitting:
            return [self._bundle_infeasible(work, pg_id, {i: layout[i][1] for i in candidates})]
        if any(layout[i][0] == self.node_id for i in fitting):
            bundle = self._bundles.fit(pg_id, index, work.place, work.hold)
            if bundle is not None:
                return [self._start(work, bundle.free, bundle.gpus, (pg_id, bundle.index))]
            where = "any bundle" if index < 0 else f"bundle {index}"
            return [self._enqueue(work, (pg_id, index), (
                f"{req.describe()} waits for room in {where} of placement group {pg_id!r}: "
                f"needs {format_amounts(work.place)}"))]
        target_node = layout[fitting[0]][0]
        if not self._is_live(target_node):
            # The node died and the layout is stale: wait for the rescheduled group.
            return [self._enqueue(work, (pg_id, index), (
                f"{req.describe()} waits for placement group {pg_id!r} to be rescheduled: "
                f"node {target_node!r} holding its bundle died"))]
        return [self._forward(work, target_node, count=False)]

    def _is_live(self, node: NodeId) -> bool:
        return node == self.node_id or node in self._cluster.nodes

    def _bundle_infeasible(
        self, work: QueuedWork, pg_id: PlacementGroupId, shapes: Mapping[int, ResourceSet]
    ) -> Infeasible:
        missing, _ = explain_shortfall(work.place, {str(i): s for i, s in shapes.items()})
        held = "; ".join(f"bundle {i} holds {format_amounts(s)}" for i, s in shapes.items())
        work.infeasible = True
        work.reason = (
            f"{work.req.describe()} is infeasible: it needs {format_amounts(work.place)} but in "
            f"placement group {pg_id!r} {held}"
        )
        self._infeasible[work.req.work_id] = work
        return Infeasible(work.req.work_id, work.reason,
                          tuple((n, need / SCALE, have / SCALE) for n, need, have in missing))


def _in_group(work: QueuedWork, pg_id: PlacementGroupId) -> bool:
    strategy = work.req.strategy
    return isinstance(strategy, PlacementGroupTarget) and strategy.pg_id == pg_id
