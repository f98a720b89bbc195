"""Queries answered from every member of the mesh: `placement_groups` asks each live peer for
its own table (`placement_groups_local`) and merges the rows, so `placement_group_table()`
lists every group whichever node it was created through (Ray's GCS holds them all);
`actors_mesh` does the same with each node's `actors` table (`zmesh.util.state`), and
`timeline_mesh` with each node's recent task spans keyed by its node id (`zmesh.timeline`),
`tasks_mesh` with those and what each node's workers run now, `objects_mesh` with the
objects in each node's store and `workers_mesh` with each node's workers and drivers
(`zmesh.util.state`).

A peer that does not answer within PEER_TIMEOUT_S is left out rather than holding the caller.
"""

from __future__ import annotations

import itertools
import logging
from typing import TYPE_CHECKING, Any

import msgspec

from zmesh.protocol.messages import runtime as m

if TYPE_CHECKING:
    from zmesh.runtime.node.server import Node

logger = logging.getLogger("zmesh.node")

PEER_TIMEOUT_S = 3.0
"""How long a mesh-wide query waits for each peer's part."""

MESH_QUERIES = {"placement_groups": "placement_groups_local", "actors_mesh": "actors",
                "timeline_mesh": "timeline_by_node", "tasks_mesh": "tasks_by_node",
                "objects_mesh": "objects_by_node", "workers_mesh": "workers_by_node"}
"""Mesh-wide query -> the query each node answers for its own part."""


class _Gather(msgspec.Struct, dict=True):
    caller: str
    request_id: int
    waiting: set[int]
    table: dict[str, Any] = msgspec.field(default_factory=dict)
    done: bool = False


class MeshQueries:
    """Fans a query out to the live peers and answers the caller with the merged tables."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self._ids = itertools.count(1)
        self._asked: dict[int, _Gather] = {}  # our request id to a peer -> its gather
        node.loop.on(m.QueryReply, self._on_reply)

    def start(self, sender: str, msg: m.Query, local: dict[str, Any]) -> None:
        """Answer `msg` from `sender` once every live peer has answered (or timed out)."""
        gather = _Gather(sender, msg.request_id, set())
        part = MESH_QUERIES[msg.what]
        for peer in self.node.groups.live_peers():
            rid = next(self._ids)
            if self.node.loop.send(peer, m.Query(request_id=rid, what=part)):
                gather.waiting.add(rid)
                self._asked[rid] = gather
        self._merge(gather, local, own=True)
        if not gather.waiting:
            self._finish(gather)
            return
        self.node.loop.call_later(PEER_TIMEOUT_S, lambda: self._finish(gather))

    def _on_reply(self, sender: str, msg: m.QueryReply, bufs: list[Any]) -> None:
        gather = self._asked.pop(msg.request_id, None)
        if gather is None or gather.done:
            return
        gather.waiting.discard(msg.request_id)
        if msg.error:
            logger.info("mesh query: %s could not answer: %s", sender, msg.error)
        else:
            try:
                part = msgspec.msgpack.decode(msg.data)
            except msgspec.DecodeError as exc:
                logger.info("mesh query: bad answer from %s: %s", sender, exc)
                part = {}
            if isinstance(part, dict):
                self._merge(gather, part, own=False)
        if not gather.waiting:
            self._finish(gather)

    @staticmethod
    def _merge(gather: _Gather, part: dict[str, Any], *, own: bool) -> None:
        for key, row in part.items():
            # A live group's row wins over a REMOVED row another node kept for the same id;
            # an actor's row from the node that runs it (`hosted`) over other nodes' rows.
            have = gather.table.get(key)
            if have is None or own or (isinstance(have, dict) and (
                    have.get("state") == "REMOVED"
                    or (isinstance(row, dict) and row.get("hosted") and not have.get("hosted")))):
                gather.table[key] = row

    def _finish(self, gather: _Gather) -> None:
        if gather.done:
            return
        gather.done = True
        for rid in gather.waiting:
            self._asked.pop(rid, None)
        self.node.loop.send(gather.caller, m.QueryReply(
            request_id=gather.request_id, data=msgspec.msgpack.encode(gather.table)))
