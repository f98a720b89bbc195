"""Which GPU ids a piece of work gets: whole GPUs get distinct ids, fractions share one id.

The runtime turns the ids into CUDA_VISIBLE_DEVICES. A pool tracks the free capacity of
each id in fixed point (see resources.SCALE); a placement-group bundle gets its own pool
over the ids it reserved from the node.
"""

from __future__ import annotations

from collections.abc import Mapping

from zmesh.core.resources import SCALE


class GpuIdPool:
    """Free capacity per GPU id; `acquire` picks ids, `release` gives them back exactly."""

    __slots__ = ("_capacity", "_free")

    def __init__(self, capacity: Mapping[int, int]) -> None:
        for gpu_id, cap in capacity.items():
            if gpu_id < 0 or not 0 < cap <= SCALE:
                raise ValueError(f"GPU id {gpu_id}: capacity {cap / SCALE:g} must be in (0, 1]")
        self._capacity = dict(sorted(capacity.items()))
        self._free = dict(self._capacity)

    @classmethod
    def for_count(cls, fixed_total: int) -> GpuIdPool:
        """A node's pool: ids 0..N-1 for N whole GPUs; ValueError for a fractional count."""
        if fixed_total % SCALE:
            raise ValueError(f"resource 'GPU': a node has whole GPUs, not {fixed_total / SCALE:g}")
        return cls({i: SCALE for i in range(fixed_total // SCALE)})

    def free(self) -> dict[int, int]:
        """Free fixed-point capacity per id (a copy)."""
        return dict(self._free)

    def total_free(self) -> int:
        return sum(self._free.values())

    def _pick(self, amount: int) -> tuple[int, ...] | None:
        if amount <= 0:
            return ()
        if amount >= SCALE:
            # Whole GPUs: distinct ids, each entirely free (amounts >1 are whole; see resources).
            count = amount // SCALE
            whole = [i for i, f in self._free.items() if f == SCALE]
            return tuple(whole[:count]) if len(whole) >= count else None
        # A fraction packs onto the fullest id that still has room, so whole GPUs stay whole.
        best: int | None = None
        for gpu_id, free in self._free.items():
            if free >= amount and (best is None or free < self._free[best]):
                best = gpu_id
        return None if best is None else (best,)

    def can_acquire(self, amount: int) -> bool:
        """True when `acquire(amount)` would succeed now."""
        return self._pick(amount) is not None

    def acquire(self, amount: int) -> tuple[int, ...] | None:
        """Take `amount` (fixed point) and return the ids it uses, or None if it does not fit."""
        ids = self._pick(amount)
        if ids:
            per_id = SCALE if amount >= SCALE else amount
            for gpu_id in ids:
                self._free[gpu_id] -= per_id
        return ids

    def release(self, ids: tuple[int, ...], amount: int) -> None:
        """Give back what `acquire(amount)` returned as `ids`; ValueError on a double release."""
        per_id = SCALE if amount >= SCALE else amount
        for gpu_id in ids:
            if gpu_id not in self._free or self._free[gpu_id] + per_id > self._capacity[gpu_id]:
                raise ValueError(f"GPU id {gpu_id}: released more than was acquired")
        for gpu_id in ids:
            self._free[gpu_id] += per_id
