"""The per-node scheduler: events in (submit, finish, cancel, gossip, placement groups),
decisions out (dispatch here, forward there, wait, infeasible, fail).

There is no global scheduler: each node runs one LocalScheduler over its own live
resources plus a gossiped view of the other nodes, and forwards work it should not run.
Waiting work queues FIFO per shape; different shapes never block each other. A plain
1-CPU task on a free node takes the short path at the top of `submit` and `finish`.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import msgspec

from zmesh.core.bundles import BundleTable
from zmesh.core.cluster_view import ClusterView
from zmesh.core.gpu_ids import GpuIdPool
from zmesh.core.groups import GroupCoordinator
from zmesh.core.resources import (
    EMPTY,
    GPU,
    ONE_CPU,
    SCALE,
    NodeResources,
    ResourceSet,
    check_labels,
    check_request_amounts,
    explain_shortfall,
    format_amounts,
    labels_match,
)
from zmesh.core.scheduler_groups import GroupScheduling, Running, unschedulable
from zmesh.core.scheduling import (
    DEFAULT,
    Decision,
    DefaultStrategy,
    Dispatch,
    Failed,
    Forward,
    Infeasible,
    NodeAffinity,
    NodeId,
    Pending,
    PendingInfo,
    PlacementGroupId,
    PlacementGroupInfo,
    PlacementGroupTarget,
    Request,
    SpreadStrategy,
    Strategy,
    WorkId,
)
from zmesh.core.wait_queue import QueuedWork, Target, WaitQueues

MAX_HOPS = 3
"""Forwards a request may take while chasing free resources; after that it waits in line."""

_CPU = "CPU"
_ONE_CPU_REQUEST = {_CPU: 1.0}  # Ray's default task request, as owners send it
_NAMED_STRATEGIES: dict[str, Strategy] = {"DEFAULT": DEFAULT, "SPREAD": SpreadStrategy()}


class LocalScheduler(GroupScheduling):
    """One node's scheduler: owns the node's free resources, GPU ids and bundles."""

    def __init__(
        self,
        node_id: NodeId,
        total: Mapping[str, float] | ResourceSet,
        labels: Mapping[str, str] | None = None,
    ) -> None:
        self.node_id = node_id
        self._total = ResourceSet.from_dict(total)
        self._labels = check_labels(labels or {}, f"node {node_id!r}")
        self._free: dict[str, int] = dict(self._total)
        self._gpus = GpuIdPool.for_count(self._total.get_amount(GPU))
        self._bundles = BundleTable(self._free, self._gpus)
        self._cluster = ClusterView(node_id)
        self._running: dict[WorkId, Running] = {}
        self._waiting = WaitQueues()
        self._infeasible: dict[WorkId, QueuedWork] = {}
        self._evicted: set[WorkId] = set()
        self._groups = GroupCoordinator(node_id, self._bundles)
        # Where the bundles of groups coordinated elsewhere live: (node, amounts) per bundle.
        self._layouts: dict[PlacementGroupId, tuple[tuple[NodeId, ResourceSet], ...]] = {}
        self._removed_pgs: set[PlacementGroupId] = set()
        self._seq = itertools.count()
        self._shape_cache: dict[Any, ResourceSet] = {}

    # ----------------------------------------------------------------- queries

    def total(self) -> dict[str, float]:
        return self._total.to_dict()

    def available(self) -> dict[str, float]:
        """Free on this node, outside any bundle (what gossip advertises). A CPU taken back
        by work that resumed after blocking can oversubscribe the node: never below 0 here."""
        return {k: v / SCALE for k, v in self._free.items() if v > 0}

    def snapshot(self) -> NodeResources:
        """This node as other nodes should see it in their cluster view."""
        free = {k: v for k, v in self._free.items() if v > 0}
        return NodeResources(self._total, ResourceSet(free), dict(self._labels))

    def running(self) -> dict[WorkId, Dispatch]:
        """What runs here now, as it was dispatched."""
        return {
            wid: Dispatch(wid, r.hold, r.gpu_ids, r.bundle) for wid, r in self._running.items()
        }

    def pending(self) -> list[PendingInfo]:
        """Work waiting here (for resources, a bundle or a node to join), oldest first."""
        works = [*self._waiting, *self._infeasible.values()]
        works.sort(key=lambda w: w.seq)
        free = f", free {format_amounts(self._free)}"
        return [
            PendingInfo(w.req.work_id, w.req.name, w.req.kind,
                        w.reason + free if w.target is None and not w.infeasible else w.reason,
                        w.infeasible)
            for w in works
        ]

    def placement_groups(self) -> list[PlacementGroupInfo]:
        """Placement groups created through this node, with their state and reason."""
        return self._groups.info()

    # ------------------------------------------------------------------ events

    def submit(self, req: Request) -> list[Decision]:
        """Place one task or actor: dispatch here, forward, queue, or report it infeasible."""
        wid = req.work_id
        if wid in self._running or wid in self._waiting.by_id or wid in self._infeasible:
            raise ValueError(f"{req.describe()}: work id {wid.hex()} was already submitted")
        res = req.resources
        if (
            (res is None or (type(res) is dict and res == _ONE_CPU_REQUEST
                             and type(res[_CPU]) is float))  # {"CPU": True} is refused below
            and req.placement_resources is None
            and type(req.strategy) is DefaultStrategy
            and req.kind == "task"
            and not req.labels
            and self._free.get(_CPU, 0) >= SCALE
        ):
            # The common case: a default 1-CPU task on a node with a CPU free.
            self._free[_CPU] -= SCALE
            self._running[wid] = Running(ONE_CPU, self._free, None, (), None)
            return [Dispatch(wid, ONE_CPU)]
        place, hold = self._shapes(req)
        return self._route(QueuedWork(req, place, hold, next(self._seq)))

    def finish(self, work_id: WorkId) -> list[Decision]:
        """Work ended: give back what it held and start what now fits."""
        run = self._running.pop(work_id, None)
        if run is None:
            if work_id in self._evicted:  # its placement group was removed; already freed
                self._evicted.discard(work_id)
                return []
            raise ValueError(f"work id {work_id.hex()} is not running on node {self.node_id!r}")
        free = run.free
        for k, v in run.hold.items():
            free[k] += v
        if run.lent:
            free[_CPU] -= run.lent  # already given back while it blocked
        if run.gpu_ids and run.pool is not None:
            run.pool.release(run.gpu_ids, run.hold.get_amount(GPU))
        if self._waiting.by_id or self._groups.has_pending():
            return self._after_release()
        return []

    def lend(self, work_id: WorkId) -> list[Decision]:
        """Running work blocks (in get or wait): give back its CPU, exactly what it holds and
        nothing else (GPUs and custom resources stay with it), and start what now fits."""
        run = self._running.get(work_id)
        if run is None or run.lent:
            return []
        cpu = run.hold.get_amount(_CPU)
        if not cpu:
            return []  # a zero-CPU task has nothing to lend
        run.lent = cpu
        run.free[_CPU] += cpu
        return self._after_release() if self._waiting.by_id or self._groups.has_pending() else []

    def lent(self, work_id: WorkId) -> int:
        """CPU (fixed point) that running `work_id` has lent out while blocked (0: none)."""
        run = self._running.get(work_id)
        return run.lent if run is not None else 0

    def reclaim(self, work_id: WorkId) -> None:
        """Blocked work resumes: it takes its CPU back at once, as Ray does, even when that
        oversubscribes the node until something finishes."""
        run = self._running.get(work_id)
        if run is None or not run.lent:
            return
        run.free[_CPU] -= run.lent
        run.lent = 0

    def validate(self) -> None:
        """Invariant: free + held + bundles' reservations == total, for every resource."""
        held: dict[str, int] = {}
        for run in self._running.values():
            if run.free is not self._free:
                continue
            for k, v in run.hold.items():
                held[k] = held.get(k, 0) + v
            if run.lent:
                held[_CPU] = held.get(_CPU, 0) - run.lent
        reserved = self._bundles.reserved_from_node()
        for k in set(self._total) | set(self._free) | set(held) | set(reserved):
            got = self._free.get(k, 0) + held.get(k, 0) + reserved.get(k, 0)
            assert got == self._total.get_amount(k), (
                f"resource {k!r}: free {self._free.get(k, 0)} + held {held.get(k, 0)} + "
                f"reserved {reserved.get(k, 0)} != total {self._total.get_amount(k)}")

    def cancel(self, work_id: WorkId) -> list[Decision]:
        """Drop waiting work, or free running work (the runtime stops it). Unknown: no-op."""
        if self._waiting.remove(work_id) or self._infeasible.pop(work_id, None):
            return []
        if work_id in self._running:
            return self.finish(work_id)
        self._evicted.discard(work_id)
        return []

    def update_cluster(self, view: Mapping[NodeId, NodeResources]) -> list[Decision]:
        """New gossip about the other nodes (this node's own entry is ignored). Nodes missing
        from `view` are dead. May forward waiting work and retry placement groups."""
        self._cluster.update(view)
        out: list[Decision] = []
        for work in sorted(self._infeasible.values(), key=lambda w: w.seq):
            del self._infeasible[work.req.work_id]
            decisions = self._route(work)
            if work.req.work_id in self._infeasible:
                continue  # still infeasible: already reported once
            out += decisions
        out += self._waiting.take_heads(self._spill)
        for pg_id, layout in list(self._layouts.items()):
            if any(not self._is_live(node) for node, _ in layout):
                del self._layouts[pg_id]  # its coordinator reschedules it and tells us
        out += self._groups.nodes_changed(self._cluster.nodes)
        out += self._place_groups(infeasible_too=True)
        return out

    # --------------------------------------------------------------- routing

    def _shapes(self, req: Request) -> tuple[ResourceSet, ResourceSet]:
        """(needed to place, held while running), validated, with Ray's defaults."""
        if req.kind not in ("task", "actor"):
            raise ValueError(f"request kind {req.kind!r} must be 'task' or 'actor'")
        if req.labels:
            check_labels(req.labels, req.describe())
        if req.resources is None:
            hold = ONE_CPU if req.kind == "task" else EMPTY
            default_place = ONE_CPU
        else:
            hold = self._resource_set(req.resources, req)
            default_place = hold
        if req.placement_resources is None:
            place = default_place
        else:
            place = self._resource_set(req.placement_resources, req)
        return place.union_max(hold), hold

    def _resource_set(self, amounts: Mapping[str, float] | ResourceSet, req: Request) -> ResourceSet:
        if isinstance(amounts, ResourceSet):
            check_request_amounts(amounts, req.describe())
            return amounts
        try:
            # Types are part of the key: {"CPU": True} == {"CPU": 1} but must be refused.
            key = (tuple(amounts.items()), tuple(map(type, amounts.values())))
            cached = self._shape_cache.get(key)
        except (AttributeError, TypeError):
            key, cached = None, None
        if cached is not None:
            return cached
        try:
            shape = ResourceSet.from_dict(amounts)
        except ValueError as exc:
            raise ValueError(f"{req.describe()}: {exc}") from None
        check_request_amounts(shape, req.describe())
        if key is not None:
            if len(self._shape_cache) > 1024:
                self._shape_cache.clear()
            self._shape_cache[key] = shape
        return shape

    def _route(self, work: QueuedWork) -> list[Decision]:
        strategy: Strategy | str = work.req.strategy
        if isinstance(strategy, str):  # Ray spells these as strings
            strategy = _NAMED_STRATEGIES.get(strategy.upper(), strategy)
        if isinstance(strategy, PlacementGroupTarget):
            return self._route_to_bundle(work, strategy)
        if isinstance(strategy, NodeAffinity):
            decided = self._route_affinity(work, strategy)
            if decided is not None:
                return decided
            strategy = DEFAULT
        if not isinstance(strategy, (DefaultStrategy, SpreadStrategy)):
            raise ValueError(f"{work.req.describe()}: unknown scheduling strategy {strategy!r}")
        req = work.req
        local_ok = labels_match(req.labels, self._labels)
        if local_ok and (req.hops > 0 or isinstance(strategy, DefaultStrategy)):
            started = self._try_start(work)
            if started is not None:
                return [started]
        if req.hops < MAX_HOPS or not (local_ok and work.place.fits_in(self._total)):
            target = self._pick_node(work, strategy, local_ok)
            if target == self.node_id:
                started = self._try_start(work)
                if started is not None:
                    return [started]
            elif target is not None:
                return [self._forward(work, target)]
        if local_ok and work.place.fits_in(self._total):
            return [self._enqueue(work, None)]
        feasible = self._cluster.feasible(work.place, req.labels)
        if feasible:
            return [self._forward(work, self._cluster.best_by_locality(feasible, req.arg_locality))]
        return [self._mark_infeasible(work)]

    def _pick_node(self, work: QueuedWork, strategy: Strategy, local_ok: bool) -> NodeId | None:
        """A node that fits `work` now: round-robin for SPREAD, else the best remote by locality."""
        remote = self._cluster.fitting_now(work.place, work.req.labels)
        if isinstance(strategy, SpreadStrategy):
            if local_ok and self._fits_now(work):
                remote = sorted([*remote, self.node_id])
            return self._cluster.next_spread(remote) if remote else None
        return self._cluster.best_by_locality(remote, work.req.arg_locality) if remote else None

    def _route_affinity(self, work: QueuedWork, aff: NodeAffinity) -> list[Decision] | None:
        """Decisions for node affinity, or None to fall back to the default (soft only)."""
        req = work.req
        if aff.node_id == self.node_id:
            if labels_match(req.labels, self._labels) and work.place.fits_in(self._total):
                started = self._try_start(work)
                return [started] if started is not None else [self._enqueue(work, None)]
            if aff.soft:
                return None
            return [self._mark_infeasible(work, only=(self.node_id, self._total, self._labels))]
        node = self._cluster.nodes.get(aff.node_id)
        if node is None:
            if aff.soft:
                return None
            return [Failed(req.work_id, unschedulable(
                req, f"its hard node affinity names node {aff.node_id!r}, which is dead or unknown"
            ))]
        if labels_match(req.labels, node.labels) and work.place.fits_in(node.total):
            return [self._forward(work, aff.node_id)]
        if aff.soft:
            return None
        return [self._mark_infeasible(work, only=(aff.node_id, node.total, node.labels))]

    def _fits_now(self, work: QueuedWork) -> bool:
        if not work.place.fits_in(self._free):
            return False
        gpu = work.hold.get_amount(GPU)
        return not gpu or self._gpus.can_acquire(gpu)

    def _try_start(self, work: QueuedWork) -> Dispatch | None:
        if not self._fits_now(work):
            return None
        return self._start(work, self._free, self._gpus, None)

    def _start(
        self,
        work: QueuedWork,
        free: dict[str, int],
        pool: GpuIdPool | None,
        bundle: tuple[PlacementGroupId, int] | None,
    ) -> Dispatch:
        gpu = work.hold.get_amount(GPU)
        gpu_ids: tuple[int, ...] = ()
        if gpu and pool is not None:
            picked = pool.acquire(gpu)
            assert picked is not None, "checked by the caller's fit test"
            gpu_ids = picked
        for k, v in work.hold.items():
            free[k] -= v
        wid = work.req.work_id
        self._running[wid] = Running(work.hold, free, pool, gpu_ids, bundle)
        return Dispatch(wid, work.hold, gpu_ids, bundle)

    def _forward(self, work: QueuedWork, node: NodeId, *, count: bool = True) -> Forward:
        if count:
            self._cluster.charge(node, work.place)
        req = msgspec.structs.replace(work.req, hops=work.req.hops + 1)
        return Forward(req.work_id, node, req)

    def _enqueue(self, work: QueuedWork, target: Target, reason: str = "") -> Pending:
        work.infeasible = False
        work.reason = reason or (
            f"{work.req.describe()} waits for resources on node {self.node_id!r}: needs "
            f"{work.place}"
        )
        self._waiting.push(work, target)
        return Pending(work.req.work_id, work.reason)

    def _mark_infeasible(
        self,
        work: QueuedWork,
        only: tuple[NodeId, ResourceSet, Mapping[str, str]] | None = None,
    ) -> Infeasible:
        """Report work no node can hold (or, with `only`, the one node it must run on)."""
        caps: Mapping[NodeId, Mapping[str, int]]
        if only is not None:
            node, total, labels = only
            caps = {node: total} if labels_match(work.req.labels, labels) else {}
        else:
            caps = self._cluster.totals(work.req.labels)
            if labels_match(work.req.labels, self._labels):
                caps = {self.node_id: self._total, **caps}
        if not caps:
            where = f"node {only[0]!r} does not" if only is not None else "no live node does"
            reason = f"{where} have the labels {dict(work.req.labels)!r}"
            missing: list[tuple[str, int, int]] = []
        else:
            missing, reason = explain_shortfall(work.place, caps)
        work.infeasible = True
        work.reason = f"{work.req.describe()} is infeasible: {reason}"
        self._infeasible[work.req.work_id] = work
        return Infeasible(
            work.req.work_id, work.reason,
            tuple((n, need / SCALE, have / SCALE) for n, need, have in missing),
        )

    # ------------------------------------------------------------- draining

    def _after_release(self) -> list[Decision]:
        out: list[Decision] = []
        if self._waiting.by_id:
            out += self._waiting.drain(self._start_queued)
        if self._groups.has_pending():
            out += self._place_groups(infeasible_too=False)
        return out

    def _start_queued(self, work: QueuedWork) -> Dispatch | None:
        target = work.target
        if target is None:
            return self._try_start(work)
        bundle = self._bundles.fit(target[0], target[1], work.place, work.hold)
        if bundle is None:
            return None
        return self._start(work, bundle.free, bundle.gpus, (bundle.pg_id, bundle.index))

    def _spill(self, work: QueuedWork) -> Forward | None:
        """Forward waiting work to another node that gossips room for it now, if any."""
        if work.req.hops >= MAX_HOPS or isinstance(work.req.strategy, NodeAffinity):
            return None
        target = self._pick_node(work, DEFAULT, local_ok=False)
        return None if target is None else self._forward(work, target)
