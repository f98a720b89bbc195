"""Placement groups: bundles of resources reserved atomically with a strategy."""

from __future__ import annotations

from typing import Any

from zmesh.object_ref import ObjectRef
from zmesh.protocol.messages import runtime as m
from zmesh.runtime import context, values
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

    def __repr__(self) -> str:
        return f"PlacementGroup({self.id.hex()[:12]}, {len(self.bundle_specs)} bundles)"


def placement_group(bundles: list[dict[str, float]], strategy: str = "PACK", name: str = "",
                    lifetime: str | None = None, **_ignored: Any) -> PlacementGroup:
    """Reserve `bundles` with `strategy` (PACK, SPREAD, STRICT_PACK, STRICT_SPREAD)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown placement strategy {strategy!r}; use one of {STRATEGIES}")
    if not bundles or not all(isinstance(b, dict) and b for b in bundles):
        raise ValueError("placement_group needs a non-empty list of non-empty resource dicts")
    clean = [{k: float(v) for k, v in b.items()} for b in bundles]
    client = context.current_client()
    pg_id = random_id(14)
    ready_id = IdGen.object_id(client.ids.task_id(), 0)
    ref = ObjectRef(ready_id, client.address, client)
    client.placement_groups[pg_id] = ready_id
    client.loop.send_threadsafe(client.node_address, m.CreatePlacementGroup(
        pg_id=pg_id, bundles=clean, strategy=strategy, name=name, owner=client.address,
        detached=lifetime == "detached"))
    return PlacementGroup(pg_id, clean, ref)


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
    """The placement group the current task or actor runs in (None here)."""
    return None


def on_state(client: Any, msg: m.PlacementGroupState) -> None:
    """Resolve `ready()` when the node says the group is reserved (client loop thread)."""
    ready_id = client.placement_groups.get(msg.pg_id)
    if ready_id is None:
        return
    if msg.state == "ready":
        client.objects.set_value(ready_id, values.encode(True, ready_id, allocate=None,
                                                         seal=None)[0])
    elif msg.state == "failed":
        from zmesh.errors import PlacementGroupError

        client.objects.set_value(ready_id, values.encode_error(PlacementGroupError(msg.reason)))
    else:
        client.tasks.pending_reasons[f"pg:{msg.pg_id.hex()}"] = msg.reason
