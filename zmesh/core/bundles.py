"""Placement-group bundles reserved on one node, and the capacity each one holds.

Reserving takes a group's bundles out of the node's free resources all at once or not
at all; work placed in a bundle then draws only on that bundle's capacity and GPU ids.
A reservation is usable once committed (two-phase, so a group spread over several nodes
is only used when every node has reserved its part).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from zmesh.core.gpu_ids import GpuIdPool
from zmesh.core.resources import GPU, SCALE, ResourceSet, explain_shortfall


class Bundle:
    """One reserved bundle: its total, what is free in it, and its GPU ids."""

    __slots__ = ("pg_id", "index", "total", "free", "gpus", "node_gpu_ids", "committed")

    def __init__(
        self, pg_id: str, index: int, total: ResourceSet, gpus: GpuIdPool | None,
        node_gpu_ids: tuple[int, ...],
    ) -> None:
        self.pg_id = pg_id
        self.index = index
        self.total = total
        self.free: dict[str, int] = dict(total)
        self.gpus = gpus
        self.node_gpu_ids = node_gpu_ids
        self.committed = False

    def fits(self, place: ResourceSet, hold: ResourceSet) -> bool:
        if not place.fits_in(self.free):
            return False
        gpu = hold.get_amount(GPU)
        return not gpu or (self.gpus is not None and self.gpus.can_acquire(gpu))


class BundleTable:
    """The bundles reserved on this node, drawing on the node's free dict and GPU pool."""

    def __init__(self, node_free: dict[str, int], node_gpus: GpuIdPool) -> None:
        self._node_free = node_free
        self._node_gpus = node_gpus
        self._groups: dict[str, dict[int, Bundle]] = {}

    def has(self, pg_id: str) -> bool:
        return pg_id in self._groups

    def bundles(self, pg_id: str) -> list[Bundle]:
        return list(self._groups.get(pg_id, {}).values())

    def reserve(self, pg_id: str, shapes: Mapping[int, ResourceSet]) -> str | None:
        """Reserve every bundle in `shapes` (index -> amounts), or none: None when done,
        else the reason it does not fit now. Replaces an uncommitted earlier reservation;
        committed bundles stay (a group rescheduled after a node died adds bundles here).
        A committed bundle asked for again is held already: its coordinator took this node
        for dead and placed the bundle here again (it raised ValueError, and the attempt
        was never answered)."""
        if pg_id in self._groups:
            self.abort(pg_id)
            held = self._groups.get(pg_id, {})
            shapes = {i: shape for i, shape in shapes.items() if i not in held}
        whole = ResourceSet()
        for shape in shapes.values():
            whole = whole + shape
        if not whole.fits_in(self._node_free):
            _, reason = explain_shortfall(whole, {"this node": self._node_free}, "has free")
            return f"bundles {sorted(shapes)}: {reason}"
        made: dict[int, Bundle] = {}
        for index, shape in sorted(shapes.items()):
            gpu = shape.get_amount(GPU)
            ids = self._node_gpus.acquire(gpu) if gpu else ()
            if ids is None:
                # Enough GPU in sum, but fragmented across ids: undo and report.
                for bundle in made.values():
                    self._node_gpus.release(bundle.node_gpu_ids, bundle.total.get_amount(GPU))
                return f"bundle {index}: {gpu / SCALE:g} GPU is not free on one set of GPU ids"
            pool = None
            if ids:
                per_id = SCALE if gpu >= SCALE else gpu
                pool = GpuIdPool(dict.fromkeys(ids, per_id))
            made[index] = Bundle(pg_id, index, shape, pool, ids)
        for k, v in whole.items():
            self._node_free[k] -= v
        self._groups.setdefault(pg_id, {}).update(made)
        return None

    def reserved_from_node(self) -> dict[str, int]:
        """What every bundle here took out of the node's free resources (for validate)."""
        out: dict[str, int] = {}
        for group in self._groups.values():
            for bundle in group.values():
                for k, v in bundle.total.items():
                    out[k] = out.get(k, 0) + v
        return out

    def commit(self, pg_id: str) -> None:
        """Make the reserved bundles usable."""
        for bundle in self._groups.get(pg_id, {}).values():
            bundle.committed = True

    def release(self, pg_id: str) -> list[Bundle]:
        """Give a group's bundles back to the node, whatever runs in them (caller evicts it)."""
        group = self._groups.pop(pg_id, {})
        self._give_back(group.values())
        return list(group.values())

    def release_indexes(self, pg_id: str, indexes: Iterable[int]) -> None:
        """Give back some of a group's bundles (its layout placed them elsewhere)."""
        group = self._groups.get(pg_id, {})
        gone = [group.pop(i) for i in indexes if i in group]
        if pg_id in self._groups and not group:
            del self._groups[pg_id]
        self._give_back(gone)

    def abort(self, pg_id: str) -> None:
        """Drop the uncommitted bundles of a group (a multi-node attempt failed elsewhere);
        committed ones stay."""
        group = self._groups.get(pg_id)
        if group is None:
            return
        dropped = [b for b in group.values() if not b.committed]
        for bundle in dropped:
            del group[bundle.index]
        if not group:
            del self._groups[pg_id]
        self._give_back(dropped)

    def _give_back(self, bundles: Iterable[Bundle]) -> None:
        for bundle in bundles:
            for k, v in bundle.total.items():
                self._node_free[k] += v
            if bundle.node_gpu_ids:
                self._node_gpus.release(bundle.node_gpu_ids, bundle.total.get_amount(GPU))

    def fit(self, pg_id: str, index: int, place: ResourceSet, hold: ResourceSet) -> Bundle | None:
        """A committed bundle of the group (`index`, or any for -1) with room now, or None."""
        group = self._groups.get(pg_id)
        if not group:
            return None
        if index >= 0:
            bundle = group.get(index)
            if bundle is not None and bundle.committed and bundle.fits(place, hold):
                return bundle
            return None
        for bundle in group.values():
            if bundle.committed and bundle.fits(place, hold):
                return bundle
        return None
