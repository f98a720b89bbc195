"""`placement_group_table()` rows in Ray's shape: states PENDING, CREATED, REMOVED and
RESCHEDULING, bundles and their nodes, and creation `stats`."""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any

REMOVED_KEPT = 1000
"""How many removed groups the table still lists (Ray lists removed groups too)."""

_STATES = {"pending": "PENDING", "infeasible": "PENDING", "preparing": "PENDING",
           "failed": "PENDING", "ready": "CREATED", "removed": "REMOVED",
           "rescheduling": "RESCHEDULING"}
_SCHEDULING = {"PENDING": "QUEUED", "CREATED": "FINISHED", "REMOVED": "REMOVED",
               "RESCHEDULING": "RESCHEDULING"}


class RemovedGroups:
    """The last REMOVED_KEPT removed groups, oldest dropped first."""

    def __init__(self) -> None:
        self.rows: OrderedDict[str, dict[str, Any]] = OrderedDict()

    def add(self, row: dict[str, Any]) -> None:
        self.rows[row["placement_group_id"]] = row
        while len(self.rows) > REMOVED_KEPT:
            self.rows.popitem(last=False)


def row(group: Any, nodes: tuple[str, ...] | None, state: str | None = None) -> dict[str, Any]:
    """One group's row; `group` is the node's GroupEntry."""
    shown = state or _STATES.get(group.state, group.state.upper())
    created = group.created_at
    ready = group.ready_at
    latency = (ready - created) * 1000 if ready else 0.0
    return {
        "placement_group_id": group.pg_id, "name": group.name,
        "bundles": dict(enumerate(group.bundles)), "strategy": group.strategy,
        "state": shown, "reason": group.reason,
        "bundles_to_node_id": dict(enumerate(nodes or ())),
        "stats": {"end_to_end_creation_latency_ms": latency,
                  "scheduling_latency_ms": latency,
                  "scheduling_attempt": group.attempts,
                  "highest_retry_delay_ms": 0.0,
                  "scheduling_state": _SCHEDULING.get(shown, shown)},
    }


def now() -> float:
    return time.monotonic()
