"""Placement groups: bundles of resources reserved atomically with a strategy."""

from __future__ import annotations

from typing import Any

from zmesh.object_ref import ObjectRef
from zmesh.protocol.messages import runtime as m
from zmesh.runtime import context
from zmesh.runtime.ids import IdGen, random_id

STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


class PlacementGroup:
    """A handle on a placement group: `ready()` gives a ref that resolves once reserved."""

    def __init__(self, pg_id: bytes, bundles: list[dict[str, float]], ready_ref: ObjectRef | None
                 ) -> None:
        self.id = pg_id
        self.bundle_specs = bundles
        self._ready = ready_ref

    @property
    def bundle_count(self) -> int:
        return len(self.bundle_specs)

    def ready(self) -> ObjectRef:
        """A ref whose value is True once every bundle is reserved."""
        if self._ready is None:
            raise ValueError("this placement group handle was not created here; use wait()")
        return self._ready

    def wait(self, timeout_seconds: float = 30) -> bool:
        """True once ready, False after timeout_seconds."""
        from zmesh.api import wait

        ready, _ = wait([self.ready()], timeout=timeout_seconds)
        return bool(ready)

    def __reduce__(self) -> Any:
        return (PlacementGroup, (self.id, self.bundle_specs, None))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PlacementGroup) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def __repr__(self) -> str:
        return f"PlacementGroup({self.id.hex()[:12]}, {len(self.bundle_specs)} bundles)"


def placement_group(bundles: list[dict[str, float]], strategy: str = "PACK", name: str = "",
                    lifetime: str | None = None, **_ignored: Any) -> PlacementGroup:
    """Reserve `bundles` with `strategy` (PACK, SPREAD, STRICT_PACK, STRICT_SPREAD)."""
    _validate_bundles(bundles)
    if strategy not in STRATEGIES:
        raise ValueError(f"invalid placement group strategy {strategy!r}; the supported "
                         f"strategies are {STRATEGIES}")
    if lifetime not in (None, "detached"):
        raise ValueError(f"placement group lifetime must be None or 'detached', got {lifetime!r}")
    clean = [{k: float(v) for k, v in b.items() if v} for b in bundles]
    client = context.current_client()
    pg_id = random_id(14)
    ready_id = IdGen.object_id(client.ids.task_id(), 0)
    ref = ObjectRef(ready_id, client.address, client)
    client.placement_groups[pg_id] = ready_id
    client.loop.send_threadsafe(client.node_address, m.CreatePlacementGroup(
        pg_id=pg_id, bundles=clean, strategy=strategy, name=name, owner=client.address,
        detached=lifetime == "detached"))
    return PlacementGroup(pg_id, clean, ref)


def _validate_bundles(bundles: Any) -> None:
    """Ray's checks and error type (ValueError): a non-empty list of dicts of str to numbers
    >= 0, none empty or all zeros."""
    example = 'for example [{"CPU": 1}, {"GPU": 1}]'
    if not isinstance(bundles, list):
        raise ValueError(f"placement group bundles must be a list, got {type(bundles).__name__}")
    if not bundles:
        raise ValueError(f"bundles must be a non-empty list of resource dicts ({example}); "
                         "got an empty list")
    for i, bundle in enumerate(bundles):
        if not isinstance(bundle, dict) or not all(isinstance(k, str) for k in bundle) or \
                not all(isinstance(v, int | float) and not isinstance(v, bool)
                        for v in bundle.values()):
            raise ValueError(f"bundles must be a non-empty list of resource dicts ({example}); "
                             f"bundle {i} is {bundle!r}")
        if any(v < 0 for v in bundle.values()):
            raise ValueError(f"bundle {i} asks for a negative amount: {bundle!r}")
        if not bundle or all(v == 0 for v in bundle.values()):
            raise ValueError(f"bundles cannot be an empty dict or hold only 0 values; bundle {i} "
                             f"is {bundle!r}")


def remove_placement_group(pg: PlacementGroup) -> None:
    """Release the group and stop the tasks and actors running in it."""
    client = context.current_client()
    client.placement_groups.pop(pg.id, None)
    client.loop.send_threadsafe(client.node_address, m.RemovePlacementGroup(pg_id=pg.id))


def placement_group_table(pg: PlacementGroup | None = None) -> dict[str, Any]:
    """State of every placement group (or of one), as Ray's placement_group_table()."""
    table = context.current_client().query("placement_groups")
    if pg is not None:
        return dict(table.get(pg.id.hex(), {}))
    return dict(table)


def get_current_placement_group() -> PlacementGroup | None:
    """The placement group the current task or actor runs in (None in the driver or outside
    a group)."""
    client = context.maybe_client()
    current = getattr(client, "current_placement_group", None) if client is not None else None
    if current is None:
        return None
    pg_id, bundles = current
    return PlacementGroup(pg_id, bundles, None)
