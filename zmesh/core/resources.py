"""Resource amounts in fixed point, and what one node has: totals, free amounts and labels.

Amounts are integers in units of 1/10000 so that ten releases of 0.1 give back exactly
1.0; floats only appear at the edges (`from_dict` / `to_dict`). Bad names or amounts raise
ValueError naming the key, because they come straight from user options.
"""

from __future__ import annotations

import math
from collections.abc import ItemsView, Iterator, KeysView, Mapping, ValuesView
from typing import Any

import msgspec

SCALE = 10_000
"""Fixed-point units per whole resource: 0.0001 is the smallest amount that can be asked for."""

CPU = "CPU"
GPU = "GPU"
MEMORY = "memory"


def to_fixed(name: object, amount: object) -> int:
    """One amount in fixed point, or ValueError naming `name` if it cannot be an amount."""
    if not isinstance(name, str) or not name or name != name.strip():
        raise ValueError(f"resource name {name!r} must be a non-empty string without spaces around it")
    if isinstance(amount, bool) or not isinstance(amount, (int, float)):
        raise ValueError(f"resource {name!r}: amount {amount!r} must be a number")
    if not math.isfinite(amount) or amount < 0:
        raise ValueError(f"resource {name!r}: amount {amount!r} must be finite and >= 0")
    fixed = round(amount * SCALE)
    if amount > 0 and fixed == 0:
        raise ValueError(
            f"resource {name!r}: amount {amount!r} is below the smallest unit {1 / SCALE}"
        )
    return fixed


def from_fixed(fixed: int) -> float:
    """A fixed-point amount as the float a user would have written (1.0, 0.25)."""
    return fixed / SCALE


class ResourceSet(Mapping[str, int]):
    """An immutable map of resource name to fixed-point amount; zero amounts are dropped.

    Indexing gives fixed-point ints (`rs["CPU"] == 10000` for one CPU); `to_dict()` gives floats.
    """

    __slots__ = ("_amounts", "_hash", "_text")

    def __init__(self, fixed: Mapping[str, int] | None = None) -> None:
        # Trusted constructor: callers pass already-validated fixed-point amounts.
        self._amounts: dict[str, int] = {k: v for k, v in (fixed or {}).items() if v}
        self._hash: int | None = None
        self._text: str | None = None

    @classmethod
    def from_dict(cls, amounts: Mapping[str, float] | ResourceSet) -> ResourceSet:
        """Validate user amounts (floats) into a ResourceSet; a ResourceSet passes through."""
        if isinstance(amounts, ResourceSet):
            return amounts
        if not isinstance(amounts, Mapping):
            raise ValueError(f"resources must be a dict of name -> amount, not {amounts!r}")
        return cls({name: to_fixed(name, amount) for name, amount in amounts.items()})

    def to_dict(self) -> dict[str, float]:
        """Float amounts, e.g. {"CPU": 1.0, "GPU": 0.5}."""
        return {k: v / SCALE for k, v in self._amounts.items()}

    def __getitem__(self, name: str) -> int:
        return self._amounts[name]

    def get_amount(self, name: str) -> int:
        """The fixed-point amount of `name`, 0 when absent."""
        return self._amounts.get(name, 0)

    def __iter__(self) -> Iterator[str]:
        return iter(self._amounts)

    # The Mapping mixins go through __getitem__ one key at a time; these run per task.
    def items(self) -> ItemsView[str, int]:
        return self._amounts.items()

    def keys(self) -> KeysView[str]:
        return self._amounts.keys()

    def values(self) -> ValuesView[int]:
        return self._amounts.values()

    def __contains__(self, name: object) -> bool:
        return name in self._amounts

    def __len__(self) -> int:
        return len(self._amounts)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._amounts.items()))
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ResourceSet):
            return self._amounts == other._amounts
        return NotImplemented

    def __repr__(self) -> str:
        return f"ResourceSet({self})"

    def __str__(self) -> str:
        """Short human form, `{CPU: 1, GPU: 0.5}` (cached: it goes into every wait reason)."""
        if self._text is None:
            self._text = format_amounts(self._amounts)
        return self._text

    def is_empty(self) -> bool:
        """True when nothing is asked for (an actor's held resources by default)."""
        return not self._amounts

    def fits_in(self, other: Mapping[str, int]) -> bool:
        """True when every amount here is at most the same amount in `other`."""
        get = other.get
        for k, v in self._amounts.items():  # noqa: SIM110  (a loop beats all() per task)
            if get(k, 0) < v:
                return False
        return True

    def __add__(self, other: Mapping[str, int]) -> ResourceSet:
        out = dict(self._amounts)
        for k, v in other.items():
            out[k] = out.get(k, 0) + v
        return ResourceSet(out)

    def __sub__(self, other: Mapping[str, int]) -> ResourceSet:
        """Difference; ValueError if any amount would go below zero (a bookkeeping bug)."""
        out = dict(self._amounts)
        for k, v in other.items():
            left = out.get(k, 0) - v
            if left < 0:
                raise ValueError(
                    f"resource {k!r}: cannot take {v / SCALE:g} from {out.get(k, 0) / SCALE:g}"
                )
            out[k] = left
        return ResourceSet(out)

    def union_max(self, other: Mapping[str, int]) -> ResourceSet:
        """Per-resource maximum: what a node must have free to satisfy both shapes."""
        out = dict(self._amounts)
        for k, v in other.items():
            if v > out.get(k, 0):
                out[k] = v
        return ResourceSet(out)

    def shortfalls(self, have: Mapping[str, int]) -> list[tuple[str, int, int]]:
        """(name, need, have) for each resource here that `have` cannot cover, by name."""
        return sorted(
            (k, v, have.get(k, 0)) for k, v in self._amounts.items() if have.get(k, 0) < v
        )


EMPTY = ResourceSet()
ONE_CPU = ResourceSet({CPU: SCALE})


def format_amounts(amounts: Mapping[str, int]) -> str:
    """A short human form of fixed-point amounts: `{CPU: 1, GPU: 0.5}`."""
    inner = ", ".join(f"{k}: {v / SCALE:g}" for k, v in sorted(amounts.items()))
    return "{" + inner + "}"


def check_request_amounts(shape: ResourceSet, what: str) -> None:
    """Ray's rule for requests: amounts above 1 must be whole (1.5 GPUs cannot be assigned)."""
    for name, fixed in shape.items():
        if fixed > SCALE and fixed % SCALE:
            raise ValueError(
                f"{what}: resource {name!r} amount {fixed / SCALE:g} is invalid; amounts above 1 "
                "must be whole numbers"
            )


class NodeResources(msgspec.Struct):
    """What one node advertises: its totals, what is free now, and its labels."""

    total: ResourceSet
    available: ResourceSet
    labels: Mapping[str, str] = msgspec.field(default_factory=dict)

    @classmethod
    def of(
        cls,
        total: Mapping[str, float] | ResourceSet,
        available: Mapping[str, float] | ResourceSet | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> NodeResources:
        """Build from float dicts (gossip or tests); `available` defaults to the total."""
        tot = ResourceSet.from_dict(total)
        avail = tot if available is None else ResourceSet.from_dict(available)
        return cls(tot, avail, dict(labels or {}))

    def to_wire(self) -> dict[str, Any]:
        """Plain data for gossip: float amounts and labels."""
        return {
            "total": self.total.to_dict(),
            "available": self.available.to_dict(),
            "labels": dict(self.labels),
        }


def labels_match(wanted: Mapping[str, str], have: Mapping[str, str]) -> bool:
    """True when every wanted label is present with the same value (exact match only)."""
    if not wanted:
        return True
    return all(have.get(k) == v for k, v in wanted.items())


def check_labels(labels: Mapping[str, str], what: str) -> dict[str, str]:
    """Validate a label dict (str -> str), raising ValueError naming the bad key."""
    if not isinstance(labels, Mapping):
        raise ValueError(f"{what}: labels must be a dict of str -> str, not {labels!r}")
    for k, v in labels.items():
        if not isinstance(k, str) or not k:
            raise ValueError(f"{what}: label key {k!r} must be a non-empty string")
        if not isinstance(v, str):
            raise ValueError(f"{what}: label {k!r} value {v!r} must be a string")
    return dict(labels)


def explain_shortfall(
    shape: ResourceSet, capacity: Mapping[str, Mapping[str, int]], what: str = "has"
) -> tuple[list[tuple[str, int, int]], str]:
    """Why `shape` fits none of the nodes in `capacity`: (name, need, best have) and a sentence.

    When some resource is short on every node, those are named against the largest node;
    when each resource exists somewhere but never together, the closest node is named.
    """
    if not capacity:
        missing = [(k, v, 0) for k, v in sorted(shape.items())]
        return missing, f"{format_amounts(shape)} fits no node: the cluster has no nodes"
    missing = []
    for name, need in sorted(shape.items()):
        best = max(cap.get(name, 0) for cap in capacity.values())
        if best < need:
            missing.append((name, need, best))
    if missing:
        parts = "; ".join(
            f"{n} need {need / SCALE:g}, largest node {what} {best / SCALE:g}"
            for n, need, best in missing
        )
        return missing, f"{format_amounts(shape)} fits no node: {parts}"
    node, short = min(
        ((node_id, shape.shortfalls(cap)) for node_id, cap in capacity.items()),
        key=lambda item: (len(item[1]), item[0]),
    )
    parts = ", ".join(f"{n} need {need / SCALE:g} {what} {have / SCALE:g}" for n, need, have in short)
    return short, (
        f"{format_amounts(shape)} fits no single node; closest is {node!r} ({parts})"
    )
