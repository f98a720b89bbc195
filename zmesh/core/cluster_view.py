"""The other nodes as this node's scheduler sees them: gossiped totals, free amounts, labels.

Free amounts are charged locally for work forwarded since the last gossip, so a burst of
tasks is spread instead of all landing on the node that looked free.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from zmesh.core.resources import CPU, NodeResources, ResourceSet, labels_match
from zmesh.core.scheduling import NodeId


class ClusterView:
    """Every live node but this one; a node missing from the last update is dead."""

    def __init__(self, self_id: NodeId) -> None:
        self.self_id = self_id
        self.nodes: dict[NodeId, NodeResources] = {}
        self._free: dict[NodeId, dict[str, int]] = {}
        self._spread = 0

    def update(self, view: Mapping[NodeId, NodeResources]) -> None:
        """Replace the view with fresh gossip (this node's own entry is ignored)."""
        self.nodes = {n: r for n, r in view.items() if n != self.self_id}
        self._free = {n: dict(r.available) for n, r in self.nodes.items()}

    def fitting_now(self, place: ResourceSet, labels: Mapping[str, str]) -> list[NodeId]:
        """Nodes with `place` free now and matching `labels`, by id."""
        return sorted(
            n for n, free in self._free.items()
            if place.fits_in(free) and labels_match(labels, self.nodes[n].labels)
        )

    def feasible(self, place: ResourceSet, labels: Mapping[str, str]) -> list[NodeId]:
        """Nodes whose totals could ever hold `place` and that match `labels`, by id."""
        return sorted(
            n for n, r in self.nodes.items()
            if place.fits_in(r.total) and labels_match(labels, r.labels)
        )

    def totals(self, labels: Mapping[str, str]) -> dict[NodeId, ResourceSet]:
        return {n: r.total for n, r in self.nodes.items() if labels_match(labels, r.labels)}

    def best_by_locality(self, nodes: Sequence[NodeId], locality: Mapping[NodeId, int]) -> NodeId:
        """The node holding most of the argument bytes; then the most free CPU; then by id."""
        return min(
            nodes,
            key=lambda n: (-locality.get(n, 0), -self._free.get(n, {}).get(CPU, 0), n),
        )

    def next_spread(self, candidates: Sequence[NodeId]) -> NodeId:
        """Round-robin over `candidates` (non-empty, sorted) across calls."""
        self._spread += 1
        return candidates[self._spread % len(candidates)]

    def charge(self, node: NodeId, place: ResourceSet) -> None:
        """Count work just forwarded to `node` against its free amounts until the next gossip."""
        free = self._free.get(node)
        if free is not None and place.fits_in(free):
            for k, v in place.items():
                free[k] -= v

    def with_self(self, own: NodeResources) -> dict[NodeId, NodeResources]:
        """The whole cluster, this node included, with charged free amounts."""
        view = {
            n: NodeResources(r.total, ResourceSet(self._free[n]), r.labels)
            for n, r in self.nodes.items()
        }
        view[self.self_id] = own
        return view
