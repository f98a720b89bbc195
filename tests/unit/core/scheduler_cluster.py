"""A few LocalSchedulers wired together in memory, carrying out each other's decisions at
once, as the runtime would over the network. Test helper, not a test module."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

from zmesh.core.scheduler import LocalScheduler
from zmesh.core.scheduling import (
    BundlesPrepared,
    Decision,
    Dispatch,
    Failed,
    Forward,
    Infeasible,
    LookupPlacementGroup,
    PGAbort,
    PGCommit,
    PGInfeasible,
    PGPending,
    PGPrepare,
    PGReady,
    PGRelease,
    PGRemoved,
    PGRescheduling,
    Request,
)


class SimCluster:
    def __init__(self, nodes: Mapping[str, Mapping[str, float]],
                 labels: Mapping[str, Mapping[str, str]] | None = None) -> None:
        labels = labels or {}
        self.nodes = {n: LocalScheduler(n, total, labels.get(n)) for n, total in nodes.items()}
        self.running: dict[bytes, tuple[str, Dispatch]] = {}
        self.failed: dict[bytes, Failed] = {}
        self.infeasible: dict[bytes, Infeasible] = {}
        self.pg_events: list[Decision] = []
        self.killed: list[bytes] = []
        self.lookups: list[tuple[str, str]] = []
        self.gossip()

    def gossip(self) -> None:
        """Every node learns every other node's current snapshot."""
        for name, sched in self.nodes.items():
            view = {n: s.snapshot() for n, s in self.nodes.items() if n != name}
            self.carry_out(name, sched.update_cluster(view))

    def kill(self, node: str) -> None:
        """The node dies: its work with it; the others see it gone at the next gossip."""
        del self.nodes[node]
        self.running = {w: r for w, r in self.running.items() if r[0] != node}
        self.gossip()

    def submit(self, node: str, req: Request) -> None:
        self.carry_out(node, self.nodes[node].submit(req))

    def finish(self, work_id: bytes) -> None:
        node, _ = self.running.pop(work_id)
        self.carry_out(node, self.nodes[node].finish(work_id))

    def create_pg(self, node: str, pg_id: str, bundles: list, strategy: str) -> None:
        self.carry_out(node, self.nodes[node].create_placement_group(pg_id, bundles, strategy))

    def remove_pg(self, node: str, pg_id: str) -> None:
        self.carry_out(node, self.nodes[node].remove_placement_group(pg_id))

    def answer_lookups(self) -> None:
        """Tell nodes that asked where a group is, as the control store would once it is ready."""
        asked, self.lookups = self.lookups, []
        for node, pg_id in asked:
            for sched in self.nodes.values():
                for info in sched.placement_groups():
                    if info.pg_id == pg_id and info.nodes is not None:
                        self.carry_out(node, self.nodes[node].note_placement_group(
                            pg_id, info.nodes, info.bundles))

    def carry_out(self, node: str, decisions: list[Decision]) -> None:
        todo = deque((node, d) for d in decisions)
        while todo:
            at, d = todo.popleft()
            out: list[tuple[str, Decision]] = []
            to = getattr(d, "node_id", None)
            if isinstance(d, (PGCommit, PGAbort, PGRelease)) and to not in self.nodes:
                continue  # a dead node holds nothing any more (as the runtime skips it)
            if isinstance(d, Dispatch):
                self.running[d.work_id] = (at, d)
            elif isinstance(d, Forward):
                out = [(d.node_id, x) for x in self.nodes[d.node_id].submit(d.request)]
            elif isinstance(d, Failed):
                self.failed[d.work_id] = d
            elif isinstance(d, Infeasible):
                self.infeasible[d.work_id] = d
            elif isinstance(d, PGPrepare):
                for reply in self.nodes[d.node_id].prepare_bundles(d.pg_id, d.attempt, d.bundles):
                    assert isinstance(reply, BundlesPrepared)
                    out += [(at, x) for x in self.nodes[at].on_bundles_prepared(reply)]
            elif isinstance(d, PGCommit):
                out = [(d.node_id, x) for x in
                       self.nodes[d.node_id].commit_bundles(d.pg_id, d.nodes, d.bundles)]
            elif isinstance(d, PGAbort):
                out = [(d.node_id, x) for x in self.nodes[d.node_id].abort_bundles(d.pg_id)]
            elif isinstance(d, PGRelease):
                out = [(d.node_id, x) for x in
                       self.nodes[d.node_id].remove_placement_group(d.pg_id)]
            elif isinstance(d, PGRemoved):
                for work_id in d.affected_work_ids:
                    self.running.pop(work_id, None)
                    self.killed.append(work_id)
                self.pg_events.append(d)
            elif isinstance(d, (PGReady, PGPending, PGInfeasible, PGRescheduling)):
                self.pg_events.append(d)
            elif isinstance(d, LookupPlacementGroup):
                self.lookups.append((at, d.pg_id))
            todo.extend(out)
