"""Creating a placement group from the node it was asked on: place, reserve, commit.

The coordinating node computes an assignment over its cluster view, reserves its own
bundles, and asks each other node to prepare its part (PGPrepare). Only when every node
has said yes are the reservations committed (PGCommit) and the group ready; one refusal,
or a node dying, aborts the attempt everywhere (PGAbort) and the group waits to retry.

When a node holding bundles of a ready group dies, the group is RESCHEDULING (as in Ray's
GCS): only the lost bundles are placed again, on live nodes and under the group's strategy
(`place_lost_bundles`), by the same prepare/commit round; the surviving bundles and the work
in them stay. Until the lost bundles fit, the group waits and is retried like a pending one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal, Protocol

from zmesh.core.placement import (
    Unplaceable,
    place_bundles,
    place_lost_bundles,
    validate_bundles,
    validate_strategy,
)
from zmesh.core.resources import NodeResources, ResourceSet
from zmesh.core.scheduling import (
    BundlesPrepared,
    Decision,
    NodeId,
    PGAbort,
    PGCommit,
    PGInfeasible,
    PGPending,
    PGPrepare,
    PGReady,
    PGRescheduling,
    PlacementGroupId,
    PlacementGroupInfo,
)

GroupState = Literal["pending", "infeasible", "preparing", "ready", "rescheduling"]


class LocalBundles(Protocol):
    """The node's own bundle reservations (BundleTable)."""

    def reserve(self, pg_id: str, shapes: Mapping[int, ResourceSet]) -> str | None: ...

    def commit(self, pg_id: str) -> None: ...

    def abort(self, pg_id: str) -> None: ...


class _Plan:
    __slots__ = ("pg_id", "name", "strategy", "shapes", "state", "nodes", "reason",
                 "attempt", "waiting_on", "prepared", "kept", "asked", "quiet")

    def __init__(self, pg_id: str, name: str, strategy: str, shapes: list[ResourceSet]) -> None:
        self.pg_id = pg_id
        self.name = name
        self.strategy = strategy
        self.shapes = shapes
        self.state: GroupState = "pending"
        self.nodes: tuple[NodeId, ...] = ()
        self.reason = ""
        self.attempt = 0
        self.waiting_on: set[NodeId] = set()
        self.prepared: set[NodeId] = set()
        # While rescheduling: the bundles that survived (index -> node); None otherwise.
        self.kept: dict[int, NodeId] | None = None
        # The attempt's PGPrepare per node (asked again if no answer comes), and the attempt
        # a resend tick last found still preparing.
        self.asked: dict[NodeId, PGPrepare] = {}
        self.quiet = 0

    def label(self) -> str:
        return f"placement group {self.name or self.pg_id!r}"


class GroupCoordinator:
    """The placement groups created through this node and where their attempts stand."""

    def __init__(self, node_id: NodeId, local: LocalBundles) -> None:
        self.node_id = node_id
        self._local = local
        self._plans: dict[PlacementGroupId, _Plan] = {}
        self._pending: set[PlacementGroupId] = set()  # checked after every finish: keep it O(1)

    def __contains__(self, pg_id: object) -> bool:
        return pg_id in self._plans

    def has_pending(self) -> bool:
        """True while some group waits for resources to be freed (pending or rescheduling)."""
        return bool(self._pending)

    def layout(self, pg_id: PlacementGroupId) -> tuple[tuple[NodeId, ResourceSet], ...] | None:
        """(node, amounts) per bundle once the group is ready, else None."""
        plan = self._plans.get(pg_id)
        if plan is None or plan.state != "ready":
            return None
        return tuple(zip(plan.nodes, plan.shapes))

    def reason(self, pg_id: PlacementGroupId) -> str:
        plan = self._plans.get(pg_id)
        return plan.reason if plan is not None else ""

    def info(self) -> list[PlacementGroupInfo]:
        return [
            PlacementGroupInfo(p.pg_id, p.name, p.strategy, p.state,
                               tuple(s.to_dict() for s in p.shapes),
                               p.nodes if p.state == "ready" else None, p.reason)
            for p in self._plans.values()
        ]

    def create(
        self,
        pg_id: PlacementGroupId,
        bundles: Sequence[Mapping[str, float] | ResourceSet],
        strategy: str,
        name: str,
        view: Mapping[NodeId, NodeResources],
    ) -> list[Decision]:
        """Start placing a new group; answers PGReady, PGPrepare..., PGPending or PGInfeasible."""
        if pg_id in self._plans:
            raise ValueError(f"placement group {pg_id!r} already exists")
        shapes = validate_bundles(bundles)
        plan = _Plan(pg_id, name, validate_strategy(strategy), shapes)
        self._plans[pg_id] = plan
        return self._attempt(plan, view, report=True)

    def retry(self, view: Mapping[NodeId, NodeResources], *, infeasible_too: bool) -> list[Decision]:
        """Try waiting groups again (infeasible ones only when the membership changed)."""
        out: list[Decision] = []
        for plan in list(self._plans.values()):
            if plan.state in ("pending", "rescheduling") or (
                    infeasible_too and plan.state == "infeasible"):
                out += self._attempt(plan, view, report=False)
        return out

    def resend_prepares(self) -> list[Decision]:
        """Called periodically: an attempt that still waits on a node a whole period later
        asks it again (its PGPrepare, or the answer, may have been lost: the group stayed
        'preparing' forever). A node asked twice replaces its first reservation, and the
        coordinator ignores an answer it already has, so asking again holds nothing twice."""
        out: list[Decision] = []
        for plan in self._plans.values():
            if plan.state != "preparing":
                continue
            if plan.quiet == plan.attempt:
                out += [plan.asked[node] for node in sorted(plan.waiting_on)]
            plan.quiet = plan.attempt
        return out

    def preparing(self) -> bool:
        """True while some attempt waits for other nodes' answers."""
        return any(plan.state == "preparing" for plan in self._plans.values())

    def on_prepared(
        self, reply: BundlesPrepared, view: Mapping[NodeId, NodeResources]
    ) -> list[Decision]:
        """A node answered PGPrepare. Stale successes are released at once, unless that node
        takes part in the attempt under way: its newer prepare replaces the stale
        reservation, and an abort (of the whole group there) would drop the new one too.
        A copy of a success that made the group ready (asked again, both answers came) is
        that same reservation: an abort could overtake the commit and drop it."""
        plan = self._plans.get(reply.pg_id)
        if (
            plan is None or plan.state != "preparing" or reply.attempt != plan.attempt
            or reply.node_id not in plan.waiting_on
        ):
            current = plan is not None and (
                (plan.state == "preparing" and (
                    reply.node_id in plan.waiting_on or reply.node_id in plan.prepared))
                or (plan.state == "ready" and reply.attempt == plan.attempt
                    and reply.node_id in plan.prepared))
            return [PGAbort(reply.pg_id, reply.node_id)] if reply.ok and not current else []
        plan.waiting_on.discard(reply.node_id)
        if not reply.ok:
            return self._fail_attempt(
                plan, f"node {reply.node_id!r} could not reserve its bundles: {reply.reason}"
            )
        plan.prepared.add(reply.node_id)
        if plan.waiting_on:
            return []
        return self._ready(plan, plan.prepared)

    def _ready(self, plan: _Plan, prepared: set[NodeId]) -> list[Decision]:
        """Commit everywhere; after a reschedule, every node holding a bundle learns the new
        layout (its own bundles were committed before)."""
        self._local.commit(plan.pg_id)
        rescheduled = plan.kept is not None
        plan.kept = None
        self._set(plan, "ready", "")
        targets = set(prepared)
        if rescheduled:
            targets |= set(plan.nodes)
        targets.discard(self.node_id)
        bundles = tuple(s.to_dict() for s in plan.shapes)
        out: list[Decision] = [
            PGCommit(plan.pg_id, node, plan.nodes, bundles) for node in sorted(targets)
        ]
        out.append(PGReady(plan.pg_id, plan.nodes, rescheduled))
        return out

    def nodes_changed(self, live: Mapping[NodeId, NodeResources]) -> list[Decision]:
        """Abort attempts that wait on a node that is no longer live; a ready group that had
        bundles on a dead node is rescheduled."""
        out: list[Decision] = []
        for plan in self._plans.values():
            if plan.state == "ready":
                out += self._lose_bundles(plan, live)
                continue
            if plan.kept is not None:
                plan.kept = {i: n for i, n in plan.kept.items()
                             if n == self.node_id or n in live}
            if plan.state != "preparing":
                continue
            gone = sorted(n for n in plan.waiting_on | plan.prepared if n not in live)
            if gone:
                plan.prepared -= set(gone)
                out += self._fail_attempt(plan, f"node {gone[0]!r} died while reserving bundles")
        return out

    def _lose_bundles(self, plan: _Plan, live: Mapping[NodeId, NodeResources],
                      why: str = "") -> list[Decision]:
        lost = tuple(i for i, n in enumerate(plan.nodes) if n != self.node_id and n not in live)
        if not lost:
            return []
        plan.kept = {i: n for i, n in enumerate(plan.nodes) if i not in lost}
        dead = sorted({plan.nodes[i] for i in lost})
        why = why or f"node {dead[0]!r} died"
        self._set(plan, "rescheduling", f"{plan.label()} is rescheduling bundles {list(lost)}: "
                                        f"{why}")
        return [PGRescheduling(plan.pg_id, lost, plan.reason)]

    def bundles_lost(self, pg_id: PlacementGroupId, node_id: NodeId) -> list[Decision]:
        """`node_id` released its bundles of the group (it took this node for dead; back, it
        says so): a ready group reschedules them; an attempt that counted them as kept
        fails (and is tried again without them); a waiting one forgets them."""
        plan = self._plans.get(pg_id)
        if plan is None or node_id == self.node_id:
            return []
        why = f"node {node_id!r} released them (it took this node for dead)"
        if plan.state == "ready":
            others = {n: NodeResources.of({}) for n in plan.nodes if n != node_id}
            return self._lose_bundles(plan, others, why)
        if plan.kept is None or node_id not in plan.kept.values():
            return []
        plan.kept = {i: n for i, n in plan.kept.items() if n != node_id}
        if plan.state == "preparing":
            return self._fail_attempt(plan, why)
        return []

    def remove(self, pg_id: PlacementGroupId) -> list[NodeId]:
        """Forget the group; the other nodes that hold or may hold its bundles, to release."""
        plan = self._plans.pop(pg_id, None)
        self._pending.discard(pg_id)
        if plan is None:
            return []
        nodes = set(plan.prepared) | plan.waiting_on
        if plan.state == "ready" or plan.kept is not None:
            nodes |= set(plan.nodes)
        nodes.discard(self.node_id)
        return sorted(nodes)

    def _attempt(
        self, plan: _Plan, view: Mapping[NodeId, NodeResources], *, report: bool
    ) -> list[Decision]:
        if plan.kept is None:
            result = place_bundles(plan.shapes, plan.strategy, view, prefer=self.node_id)
        else:
            result = place_lost_bundles(plan.shapes, plan.strategy, plan.kept, view,
                                        prefer=self.node_id)
        if isinstance(result, Unplaceable):
            state: GroupState = "infeasible" if result.infeasible else "pending"
            return self._wait(plan, state, result.reason, report)
        by_node = result.by_node()
        if plan.kept is not None:  # only the lost bundles are reserved again
            by_node = {n: [i for i in idx if i not in plan.kept] for n, idx in by_node.items()}
            by_node = {n: idx for n, idx in by_node.items() if idx}
        local = by_node.pop(self.node_id, [])
        if local:
            refused = self._local.reserve(plan.pg_id, {i: plan.shapes[i] for i in local})
            if refused is not None:
                return self._wait(plan, "pending", refused, report)
        plan.nodes = result.nodes
        if not by_node:
            return self._ready(plan, set())
        plan.attempt += 1
        self._set(plan, "preparing", f"{plan.label()} is reserving bundles on {sorted(by_node)}")
        plan.waiting_on = set(by_node)
        plan.prepared = set()
        plan.asked = {
            node: PGPrepare(plan.pg_id, node, plan.attempt,
                            {i: plan.shapes[i].to_dict() for i in idx})
            for node, idx in sorted(by_node.items())
        }
        return list(plan.asked.values())

    def _set(self, plan: _Plan, state: GroupState, reason: str) -> None:
        plan.state, plan.reason = state, reason
        if state in ("pending", "rescheduling"):
            self._pending.add(plan.pg_id)
        else:
            self._pending.discard(plan.pg_id)

    def _wait(self, plan: _Plan, state: GroupState, why: str, report: bool) -> list[Decision]:
        if plan.kept is not None:  # RESCHEDULING until the lost bundles fit (as in Ray)
            self._set(plan, "rescheduling", f"{plan.label()} cannot be rescheduled yet: {why}")
            return []
        changed = report or state != plan.state
        self._set(plan, state, f"{plan.label()} cannot be placed: {why}")
        if not changed:
            return []
        if state == "infeasible":
            return [PGInfeasible(plan.pg_id, plan.reason)]
        return [PGPending(plan.pg_id, plan.reason)]

    def _fail_attempt(self, plan: _Plan, why: str) -> list[Decision]:
        out: list[Decision] = [PGAbort(plan.pg_id, node) for node in sorted(plan.prepared)]
        self._local.abort(plan.pg_id)
        plan.prepared.clear()
        plan.waiting_on.clear()
        if plan.kept is not None:
            self._set(plan, "rescheduling", f"{plan.label()} cannot be rescheduled yet: {why}")
            return out
        self._set(plan, "pending", f"{plan.label()} cannot be placed yet: {why}")
        out.append(PGPending(plan.pg_id, plan.reason))
        return out
