"""Where a placement group's bundles go: a pure function of the bundles, strategy and view.

`place_bundles` answers with an Assignment (bundle i -> node) or Unplaceable with a reason
and whether it can never fit the cluster as it is (infeasible: wait for a node to join) or
only not now (wait for resources to be freed). It never reserves anything; the scheduler
does that atomically once it has an assignment.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal, get_args

import msgspec

from zmesh.core.resources import (
    EMPTY,
    NodeResources,
    ResourceSet,
    check_request_amounts,
    explain_shortfall,
    format_amounts,
)

PlacementStrategy = Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"]
STRATEGIES: tuple[str, ...] = get_args(PlacementStrategy)


class Assignment(msgspec.Struct, frozen=True):
    """Bundle i goes to `nodes[i]`."""

    nodes: tuple[str, ...]

    def by_node(self) -> dict[str, list[int]]:
        """Bundle indexes per node, in bundle order."""
        out: dict[str, list[int]] = {}
        for index, node in enumerate(self.nodes):
            out.setdefault(node, []).append(index)
        return out


class Unplaceable(msgspec.Struct, frozen=True):
    """Why the bundles cannot be placed; `infeasible` when no amount of waiting helps."""

    reason: str
    infeasible: bool


def validate_bundles(bundles: Sequence[Mapping[str, float] | ResourceSet]) -> list[ResourceSet]:
    """Bundles as ResourceSets; ValueError naming the bundle for an empty or bad one."""
    if isinstance(bundles, (str, bytes, Mapping)) or not isinstance(bundles, Sequence):
        raise ValueError(f"bundles must be a list of resource dicts, not {bundles!r}")
    if not bundles:
        raise ValueError("bundles must hold at least one bundle")
    shapes = []
    for index, bundle in enumerate(bundles):
        try:
            shape = ResourceSet.from_dict(bundle)
            check_request_amounts(shape, f"bundle {index}")
        except ValueError as exc:
            raise ValueError(f"bundle {index}: {exc}") from None
        if shape.is_empty():
            raise ValueError(f"bundle {index}: {dict(bundle)!r} asks for no resources")
        shapes.append(shape)
    return shapes


def validate_strategy(strategy: str) -> PlacementStrategy:
    if strategy not in STRATEGIES:
        raise ValueError(f"placement strategy {strategy!r} is not one of {', '.join(STRATEGIES)}")
    return strategy  # type: ignore[return-value]


def place_bundles(
    bundles: Sequence[Mapping[str, float] | ResourceSet],
    strategy: str,
    view: Mapping[str, NodeResources],
    *,
    prefer: str | None = None,
) -> Assignment | Unplaceable:
    """Assign every bundle to a node of `view` (all or nothing), preferring node `prefer`.

    Checked against node totals first (can it ever fit?) and then against free amounts.
    """
    shapes = validate_bundles(bundles)
    strat = validate_strategy(strategy)
    return _place(shapes, strat, sorted(view, key=lambda n: (n != prefer, n)), view)


def _place(
    shapes: Sequence[ResourceSet], strat: str, order: Sequence[str],
    view: Mapping[str, NodeResources],
) -> Assignment | Unplaceable:
    """Totals first (ever?), then free amounts (now?), trying nodes in `order`."""
    totals = {n: view[n].total for n in order}
    if _assign(shapes, strat, totals) is None:
        return Unplaceable(_why(shapes, strat, totals, "has"), infeasible=True)
    free = {n: view[n].available for n in order}
    nodes = _assign(shapes, strat, free)
    if nodes is None:
        return Unplaceable(_why(shapes, strat, free, "has free"), infeasible=False)
    return Assignment(tuple(nodes))


def _total(shapes: Sequence[ResourceSet]) -> ResourceSet:
    out = EMPTY
    for shape in shapes:
        out = out + shape
    return out


def _assign(
    shapes: Sequence[ResourceSet], strategy: str, caps: Mapping[str, Mapping[str, int]]
) -> list[str] | None:
    """One node per bundle within `caps` (in preference order), or None."""
    if strategy == "STRICT_SPREAD":
        return _match_distinct(shapes, caps)
    if strategy in ("PACK", "STRICT_PACK"):
        whole = _total(shapes)
        for node, cap in caps.items():
            if whole.fits_in(cap):
                return [node] * len(shapes)
        if strategy == "STRICT_PACK":
            return None
    left = {node: dict(cap) for node, cap in caps.items()}
    count = dict.fromkeys(caps, 0)
    nodes: list[str] = []
    for shape in shapes:
        fitting = [n for n in left if shape.fits_in(left[n])]
        if not fitting:
            return None
        if strategy == "PACK":
            # Fill nodes already in use before opening a new one.
            node = next((n for n in fitting if count[n]), fitting[0])
        else:
            node = min(fitting, key=lambda n: count[n])
        for k, v in shape.items():
            left[node][k] -= v
        count[node] += 1
        nodes.append(node)
    return nodes


def _match_distinct(
    shapes: Sequence[ResourceSet], caps: Mapping[str, Mapping[str, int]]
) -> list[str] | None:
    """A distinct node per bundle (bipartite matching by augmenting paths), or None."""
    if len(shapes) > len(caps):
        return None
    fits = [[n for n, cap in caps.items() if shape.fits_in(cap)] for shape in shapes]
    owner: dict[str, int] = {}

    def augment(bundle: int, seen: set[str]) -> bool:
        # A free node first (keeps the preferred order), then try to move an earlier bundle.
        for node in fits[bundle]:
            if node not in owner:
                owner[node] = bundle
                return True
        for node in fits[bundle]:
            if node in seen:
                continue
            seen.add(node)
            if augment(owner[node], seen):
                owner[node] = bundle
                return True
        return False

    for bundle in range(len(shapes)):
        if not augment(bundle, set()):
            return None
    nodes = [""] * len(shapes)
    for node, bundle in owner.items():
        nodes[bundle] = node
    return nodes


def _why(
    shapes: Sequence[ResourceSet], strategy: str, caps: Mapping[str, Mapping[str, int]], what: str
) -> str:
    """A sentence naming the bundle or resource that does not fit."""
    for index, shape in enumerate(shapes):
        if not any(shape.fits_in(cap) for cap in caps.values()):
            _, reason = explain_shortfall(shape, caps, what)
            return f"bundle {index} {reason}"
    if strategy == "STRICT_SPREAD":
        if len(shapes) > len(caps):
            return (
                f"STRICT_SPREAD needs {len(shapes)} distinct nodes for {len(shapes)} bundles; "
                f"the cluster has {len(caps)}"
            )
        return (
            f"STRICT_SPREAD needs {len(shapes)} distinct nodes that each fit a bundle; "
            f"not enough nodes {what} room for them"
        )
    whole = _total(shapes)
    if strategy == "STRICT_PACK":
        _, reason = explain_shortfall(whole, caps, what)
        return f"STRICT_PACK puts all bundles on one node: {reason}"
    return (
        f"{strategy}: the bundles (together {format_amounts(whole)}) do not fit what the nodes "
        f"{what}"
    )


def place_lost_bundles(
    bundles: Sequence[Mapping[str, float] | ResourceSet],
    strategy: str,
    kept: Mapping[int, str],
    view: Mapping[str, NodeResources],
    *,
    prefer: str | None = None,
) -> Assignment | Unplaceable:
    """Place again the bundles not in `kept` (index -> surviving node) after their node died.

    The group's strategy holds across old and new bundles, as in Ray's rescheduling: STRICT_PACK
    stays on the kept bundles' node, STRICT_SPREAD avoids every node the group still uses, PACK
    prefers those nodes and SPREAD prefers the others. The answer covers every bundle.
    """
    shapes = validate_bundles(bundles)
    strat = validate_strategy(strategy)
    lost = [i for i in range(len(shapes)) if i not in kept]
    used = set(kept.values())
    if strat == "STRICT_PACK" and used:
        view = {n: r for n, r in view.items() if n in used}
    elif strat == "STRICT_SPREAD":
        view = {n: r for n, r in view.items() if n not in used}
    if strat in ("PACK", "STRICT_PACK"):
        first = sorted(view, key=lambda n: (n not in used, n != prefer, n))
    else:
        first = sorted(view, key=lambda n: (n in used, n != prefer, n))
    if not lost:
        return Assignment(tuple(kept[i] for i in range(len(shapes))))
    if not first:
        where = "the node holding its other bundles" if strat == "STRICT_PACK" else "a live node"
        return Unplaceable(f"{strat} needs {where} for bundles {lost}, and none is left",
                           infeasible=True)
    result = _place([shapes[i] for i in lost], strat, first, view)
    if isinstance(result, Unplaceable):
        return result
    nodes = dict(kept)
    nodes.update(zip(lost, result.nodes))
    return Assignment(tuple(nodes[i] for i in range(len(shapes))))
