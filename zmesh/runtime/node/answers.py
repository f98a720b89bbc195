"""What a node answers to `Query` messages: resources, nodes, leases, the store, metrics,
ops and actor queries (`zmesh status`, `zmesh list`, the dashboard, tests). Read-only: it
reads the node's tables and changes nothing. Unlike the shells that act (leases, forwarding,
store room), it takes the `Node` itself: what it reads is some twenty of the node's tables,
so a port for each would be no narrower, and it sends nothing but its replies."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import msgspec

from zmesh.protocol.messages import runtime as m
from zmesh.runtime.node.mesh_query import MESH_QUERIES
from zmesh.runtime.node.ops import QUERIES as OPS_QUERIES
from zmesh.runtime.node.test_hooks import TEST_QUERIES, refuse
from zmesh.runtime.node.user_kv import USER_KV_QUERIES, answer_kv_query

if TYPE_CHECKING:
    from zmesh.runtime.node.server import Node


class NodeAnswers:
    """Answers queries from what the node holds (loop thread only)."""

    def __init__(self, node: Node) -> None:
        self.node = node

    def metrics(self) -> dict[str, Any]:
        """Counters and gauges for /metrics (`zmesh dashboard` turns them into Prometheus)."""
        st, ts = self.node.store.stats(), self.node.objects.transfer.stats()
        pending = self.node.scheduler.pending()
        out = self.node.ops.metrics({w.pid for w in self.node.workers.values()})
        peers = getattr(self.node.loop.endpoint, "peers", None)  # zmq endpoints: who was refused
        out.update({
            "node_id": self.node.node_id,
            "queued": sum(1 for p in pending if not p.infeasible),
            "infeasible": sum(1 for p in pending if p.infeasible),
            "leases": len(self.node.leases),
            "workers": len(self.node.workers), "idle_workers": self.node.lease_shell.idle_count(),
            "actors": sum(1 for e in self.node.actors.actors.values() if e.state == "alive"),
            "store": {k: getattr(st, k) for k in st.__struct_fields__},
            "transfer": {k: getattr(ts, k) for k in ts.__struct_fields__},
            "messages_received": self.node.loop.received,
            "refused_connections": peers.counts() if peers is not None else {},
            "coalesced": {k: getattr(self.node.loop.endpoint, k, 0)  # (transports.zmq_batch)
                          for k in ("batches_sent", "batched_messages", "dropped_malformed",
                                    "dropped_unflushed")},
            "resources": self.node.scheduler.total(), "available": self.node.scheduler.available(),
        })
        return out

    def _actor_pid(self, name: str) -> int:
        """The pid of the worker running the actor named `name` here (0: none here)."""
        for entry in self.node.actors.actors.values():
            if entry.spec.name == name and entry.worker is not None and entry.worker.pid:
                return entry.worker.pid
        return 0

    def on_query(self, sender: str, msg: m.Query, bufs: list[Any]) -> None:
        if msg.what in USER_KV_QUERIES:  # answered when the control store has answered
            answer_kv_query(self.node, sender, msg)
            return
        if msg.what in MESH_QUERIES:  # answered once the peers have answered
            try:
                local = self._answer(MESH_QUERIES[msg.what], msg.arg)
            except Exception as exc:
                self.node.loop.send(sender, m.QueryReply(request_id=msg.request_id, data=b"",
                                                         error=str(exc)))
                return
            self.node.mesh_queries.start(sender, msg, local)
            return
        try:
            data = self._answer(msg.what, msg.arg)
            reply = m.QueryReply(request_id=msg.request_id, data=msgspec.msgpack.encode(data))
        except Exception as exc:
            reply = m.QueryReply(request_id=msg.request_id, data=b"", error=str(exc))
        self.node.loop.send(sender, reply)

    def _answer(self, what: str, arg: bytes) -> Any:
        if what == "cluster_resources":
            return self._sum_resources("Resources")
        if what == "available_resources":
            return self._sum_resources("Available")
        if what == "function":
            blob = self.node.functions.get(arg)
            if blob is None:
                raise KeyError(f"function {arg.hex()} was never exported to this node")
            return blob
        if what == "nodes":
            return self.node.mesh.describe() if self.node.mesh is not None else []
        if what == "node":
            return {"node_id": self.node.node_id, "address": self.node.mesh_address, "ipc": self.node.address,
                    "pid": os.getpid(), "session_dir": self.node.session_dir,
                    "store_dir": self.node.store_dir, "labels": self.node.labels}
        if what == "pending":
            return [{"name": p.name, "kind": p.kind, "reason": p.reason,
                     "infeasible": p.infeasible} for p in self.node.scheduler.pending()]
        if what in TEST_QUERIES:
            if self.node.hooks is None:
                return refuse(what)
            return self.node.hooks.answer(what, arg)
        if what == "leases":
            return [{"lease_id": le.lease_id.hex(), "name": le.name, "owner": le.owner,
                     "state": "granted" if le.worker is not None else
                     ("forwarded" if le.remote else "pending")} for le in self.node.leases.values()]
        if what == "store":
            st = self.node.store.stats()
            return {k: getattr(st, k) for k in st.__struct_fields__}
        if what in OPS_QUERIES:
            return self.node.ops.answer(what, arg, self._actor_pid)
        if what == "metrics":
            return self.metrics()
        if what == "objects_by_node":  # this node's part of `objects_mesh` (state API)
            return {self.node.node_id: self.node.store.objects()}
        if what == "workers_by_node":  # this node's part of `workers_mesh` (state API)
            pool = [{"worker_id": w.worker_id.hex(), "pid": w.pid, "state": w.state,
                     "kind": "worker", "actor_id": w.actor_id.hex()}
                    for w in self.node.pool.by_pid.values()]
            drivers = [{"worker_id": "", "pid": c.pid, "state": "driver", "kind": "driver",
                        "actor_id": ""}
                       for c in self.node.clients.values() if c.kind == "driver"]
            return {self.node.node_id: pool + drivers}
        if what == "memory":
            return {"node_id": self.node.node_id, "objects": self.node.store.objects(),
                    "clients": [{"address": c.address, "kind": c.kind, "pid": c.pid}
                                for c in self.node.clients.values()]}
        if what == "transfer":
            ts = self.node.objects.transfer.stats()
            return {k: getattr(ts, k) for k in ts.__struct_fields__}
        return self.node.actors.answer(what, arg)


    def _sum_resources(self, field: str) -> dict[str, float]:
        out: dict[str, float] = {}
        for row in self.node.mesh.describe() if self.node.mesh is not None else []:
            if row["Alive"]:
                for k, v in row[field].items():
                    if not k.startswith("node:"):
                        out[k] = out.get(k, 0.0) + v
        for k in list(self.node.scheduler.total()):
            if k.startswith("node:"):
                out[k] = 1.0 if field == "Resources" else self.node.scheduler.available().get(k, 0.0)
        return out
