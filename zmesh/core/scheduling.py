"""The scheduler's vocabulary: what to place (Request, strategies) and what it decided.

A Request is one task or actor; the LocalScheduler answers each event with a list of
decisions that the runtime carries out (start a worker, forward to a node, warn the driver,
reserve bundles on another node). Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, Union

import msgspec

from zmesh.core.resources import ResourceSet
from zmesh.errors import ZmeshError

WorkId = bytes
NodeId = str
PlacementGroupId = str


class DefaultStrategy(msgspec.Struct, frozen=True):
    """Run on the local node if it fits now, else on the node holding most argument bytes."""


class SpreadStrategy(msgspec.Struct, frozen=True):
    """Round-robin over the nodes that fit ("SPREAD")."""


class NodeAffinity(msgspec.Struct, frozen=True):
    """Run on `node_id`; hard: fail if it is dead or unknown; soft: prefer it, else anywhere."""

    node_id: NodeId
    soft: bool = False


class PlacementGroupTarget(msgspec.Struct, frozen=True):
    """Run inside bundle `bundle_index` of placement group `pg_id` (-1: any of its bundles)."""

    pg_id: PlacementGroupId
    bundle_index: int = -1

    def __post_init__(self) -> None:
        if isinstance(self.bundle_index, bool) or not isinstance(self.bundle_index, int):
            raise ValueError(f"bundle_index {self.bundle_index!r} must be an int")
        if self.bundle_index < -1:
            raise ValueError(f"bundle_index {self.bundle_index} must be -1 (any) or >= 0")


Strategy = Union[DefaultStrategy, SpreadStrategy, NodeAffinity, PlacementGroupTarget]
DEFAULT = DefaultStrategy()
SPREAD = SpreadStrategy()

_EMPTY_LOCALITY: Mapping[NodeId, int] = {}
_EMPTY_LABELS: Mapping[str, str] = {}


class Request(msgspec.Struct):
    """One task or actor to place.

    `resources` is what the work holds while it runs; None means Ray's default: a task holds
    1 CPU, an actor holds nothing. `placement_resources` is what a node must have free to
    place it (None: an actor with default resources needs 1 CPU; otherwise the same as
    `resources`). `arg_locality` maps node -> bytes of the work's arguments stored there.
    `labels` must all match the chosen node's labels. `hops` counts forwards so far.
    `strategy` also takes Ray's names "DEFAULT" and "SPREAD".
    """

    work_id: WorkId
    kind: Literal["task", "actor"] = "task"
    resources: Mapping[str, float] | ResourceSet | None = None
    placement_resources: Mapping[str, float] | ResourceSet | None = None
    strategy: Strategy | Literal["DEFAULT", "SPREAD"] = DEFAULT
    arg_locality: Mapping[NodeId, int] = msgspec.field(default_factory=lambda: _EMPTY_LOCALITY)
    labels: Mapping[str, str] = msgspec.field(default_factory=lambda: _EMPTY_LABELS)
    name: str = ""
    hops: int = 0

    def describe(self) -> str:
        """How messages name this work: its name if it has one, else its id."""
        return f"{self.kind} {self.name!r}" if self.name else f"{self.kind} {self.work_id.hex()}"


class Dispatch(msgspec.Struct, frozen=True):
    """Run the work on this node now, holding `resources`, with these GPU ids (for
    CUDA_VISIBLE_DEVICES), inside `bundle` (pg_id, index) when it belongs to a placement group."""

    work_id: WorkId
    resources: ResourceSet
    gpu_ids: tuple[int, ...] = ()
    bundle: tuple[PlacementGroupId, int] | None = None


class Forward(msgspec.Struct, frozen=True):
    """Send `request` (hops already counted) to node `node_id`, whose scheduler submits it."""

    work_id: WorkId
    node_id: NodeId
    request: Request


class Pending(msgspec.Struct, frozen=True):
    """The work waits on this node for resources it can get here eventually."""

    work_id: WorkId
    reason: str


class Infeasible(msgspec.Struct, frozen=True):
    """No live node can ever fit the work; it stays queued in case a node joins.

    `missing` holds (resource, need, largest amount any node has), as floats.
    """

    work_id: WorkId
    reason: str
    missing: tuple[tuple[str, float, float], ...] = ()


class Failed(msgspec.Struct, frozen=True):
    """The work can never be scheduled; the runtime fails it with `error`."""

    work_id: WorkId
    error: ZmeshError


class LookupPlacementGroup(msgspec.Struct, frozen=True):
    """Work names a placement group this node does not know: find where its bundles are
    and tell the scheduler with `note_placement_group`."""

    pg_id: PlacementGroupId


class PGReady(msgspec.Struct, frozen=True):
    """Every bundle is reserved; bundle i lives on `nodes[i]`."""

    pg_id: PlacementGroupId
    nodes: tuple[NodeId, ...]
    rescheduled: bool = False  # ready again after a node holding some bundles died


class PGRescheduling(msgspec.Struct, frozen=True):
    """A node holding bundles `lost` died: the group is RESCHEDULING until they are placed
    again on live nodes (then PGReady with rescheduled=True)."""

    pg_id: PlacementGroupId
    lost: tuple[int, ...]
    reason: str


class PGPending(msgspec.Struct, frozen=True):
    """The group fits the cluster's totals but not what is free now; it is retried."""

    pg_id: PlacementGroupId
    reason: str


class PGInfeasible(msgspec.Struct, frozen=True):
    """The group fits no arrangement of the live nodes' totals; it waits for nodes to join."""

    pg_id: PlacementGroupId
    reason: str


class PGRemoved(msgspec.Struct, frozen=True):
    """The group's bundles on this node are released; kill the work in `affected_work_ids`.
    `coordinated`: this node coordinated the group, so the group itself is gone (not only
    this node's part of it), and only then may this node tell others it was removed."""

    pg_id: PlacementGroupId
    affected_work_ids: tuple[WorkId, ...]
    coordinated: bool = False


class PGPrepare(msgspec.Struct, frozen=True):
    """Ask `node_id` to reserve these bundles (index -> amounts) for attempt `attempt`:
    call its `prepare_bundles` and route the answer back to `on_bundles_prepared` here."""

    pg_id: PlacementGroupId
    node_id: NodeId
    attempt: int
    bundles: dict[int, dict[str, float]]


class BundlesPrepared(msgspec.Struct, frozen=True):
    """A node's answer to PGPrepare, for the coordinating node's `on_bundles_prepared`."""

    pg_id: PlacementGroupId
    node_id: NodeId
    attempt: int
    ok: bool
    reason: str = ""


class PGCommit(msgspec.Struct, frozen=True):
    """Tell `node_id` its prepared bundles are in use: call its `commit_bundles(pg_id, nodes,
    bundles)`; bundle i (amounts `bundles[i]`) lives on `nodes[i]`."""

    pg_id: PlacementGroupId
    node_id: NodeId
    nodes: tuple[NodeId, ...]
    bundles: tuple[dict[str, float], ...]


class PGAbort(msgspec.Struct, frozen=True):
    """Tell `node_id` to drop the bundles it prepared for a failed attempt (`abort_bundles`)."""

    pg_id: PlacementGroupId
    node_id: NodeId


class PGRelease(msgspec.Struct, frozen=True):
    """Tell `node_id` to drop its bundles of the group (`remove_placement_group` there)."""

    pg_id: PlacementGroupId
    node_id: NodeId


Decision = Union[
    Dispatch,
    Forward,
    Pending,
    Infeasible,
    Failed,
    LookupPlacementGroup,
    PGReady,
    PGRescheduling,
    PGPending,
    PGInfeasible,
    PGRemoved,
    PGPrepare,
    BundlesPrepared,
    PGCommit,
    PGAbort,
    PGRelease,
]


class PendingInfo(msgspec.Struct, frozen=True):
    """One waiting piece of work, for `zmesh status` and driver warnings."""

    work_id: WorkId
    name: str
    kind: str
    reason: str
    infeasible: bool


class PlacementGroupInfo(msgspec.Struct, frozen=True):
    """A placement group this node coordinates: its state and, when waiting, why."""

    pg_id: PlacementGroupId
    name: str
    strategy: str
    state: Literal["pending", "infeasible", "preparing", "ready", "rescheduling"]
    bundles: tuple[dict[str, float], ...]
    nodes: tuple[NodeId, ...] | None
    reason: str
