"""The real-process target: a local `Cluster` whose nodes and workers take a FaultPlan live.

    with local_cluster(nodes=3, faults=plan) as mesh:    # a driver is connected on node 0
        run_my_program(mesh)                              # faults fire on their own clock
    print(mesh.report())                                  # what was injected, and when

Faults reach the processes as they would in production: SIGKILL and SIGSTOP/SIGCONT from
outside, and cut links, dropped, duplicated, delayed or reordered messages through the chaos
transport each test node wraps around its endpoint, set over the node's control channel
(the `block` and `chaos` queries, which only nodes started for tests answer). Link faults
touch messages between nodes; a node's local workers and drivers share its machine and
see none.

With a plan in seconds a thread fires faults at their times from `__enter__`; with a plan in
steps the program calls `mesh.step()` before each operation. On exit every fault is undone,
the cluster is shut down, and `leaks()` says what process, file or fd was left behind.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import msgspec

from zmesh.errors import ZmeshError
from zmesh.runtime.node.query import NodeQuerier
from zmesh.store.sweep import default_store_root, pid_alive
from zmesh.testing.cluster import Cluster, ClusterNode
from zmesh.testing.faults import (
    Fault,
    FaultEvent,
    FaultPlan,
    KillActor,
    KillNode,
    KillOwner,
    KillWorker,
    LinkFault,
    Partition,
    Pause,
    SlowNode,
)

__all__ = ["Injected", "LocalCluster", "local_cluster"]


@dataclass(frozen=True)
class Injected:
    """One action taken on the cluster: when (seconds since start), what, and on what."""

    at: float
    action: str
    detail: str
    applied: bool = True  # False: nothing to act on (no worker to kill, node already dead)

    def __str__(self) -> str:
        mark = "" if self.applied else " (skipped)"
        return f"t={self.at:6.2f}s  {self.action}: {self.detail}{mark}"


class LocalCluster:
    """`nodes` test nodes on this machine, a driver connected to node 0, and a plan."""

    def __init__(self, nodes: int = 3, plan: FaultPlan | None = None, *, num_cpus: float = 2,
                 connect: bool = True, namespace: str | None = None) -> None:
        self.plan = plan if plan is not None else FaultPlan(seed=0, nodes=nodes)
        if self.plan.nodes != nodes:
            raise ValueError(f"the plan is for {self.plan.nodes} nodes, the cluster has {nodes}")
        self.plan.check("local")
        self.num_nodes, self.num_cpus = nodes, num_cpus
        self.connect, self.namespace = connect, namespace
        self.cluster = Cluster(shutdown_at_exit=True)
        self.nodes: list[ClusterNode] = []
        self.injected: list[Injected] = []
        self.killed_nodes: set[int] = set()
        self._events = self.plan.events()
        self._next = 0
        self._active: dict[int, Fault] = {}
        self._paused: set[int] = set()
        self._stale: set[int] = set()  # paused nodes whose link settings changed meanwhile
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._querier: NodeQuerier | None = None
        self._t0 = 0.0
        self._step = -1
        self._fds_before = 0
        self._pids: list[int] = []
        self._owners: dict[str, int] = {}  # name -> pid of a driver the program started
        self._store_dirs: list[str] = []

    # -- lifecycle -------------------------------------------------------------------------
    def __enter__(self) -> LocalCluster:
        self._fds_before = _fd_count()
        try:
            # One at a time, from this thread: a node dies with the thread that started it
            # (its parent-death signal is tied to that thread).
            for _ in range(self.num_nodes):
                self.nodes.append(self.cluster.add_node(num_cpus=self.num_cpus, wait=False))
            self.cluster.wait_for_nodes()
            if self.connect:
                self.cluster.connect(namespace=self.namespace)
        except BaseException:
            self.cluster.shutdown()
            raise
        self._pids = [n.pid for n in self.nodes]
        self._store_dirs = [os.path.join(default_store_root(), n.node_id) for n in self.nodes]
        # Fault control goes over the nodes' authenticated channel, with the cluster's keys.
        self._querier = NodeQuerier(credentials=self.cluster.credentials)
        plugin = sys.modules.get("zmesh.testing.plugin")
        if plugin is not None:  # under pytest: a failing test prints this plan and its replay
            plugin.note_plan(self.plan)
            plugin.note_mesh(self)
        self._t0 = time.monotonic()
        if self.plan.unit == "s" and self._events:
            self._thread = threading.Thread(target=self._run_clock, name="zmesh-faults",
                                            daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop firing faults, undo the lasting ones, shut the cluster down."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        with self._lock:
            for index in list(self._active):
                self._undo(index, self._active.pop(index))
        if self._querier is not None:
            self._querier.close()
            self._querier = None
        self.cluster.shutdown()
        plugin = sys.modules.get("zmesh.testing.plugin")
        if plugin is not None:
            plugin.note_mesh(None)
            plugin.note_plan(self.plan, self.faults_injected())

    @property
    def address(self) -> str:
        return self.nodes[0].address

    def add_owner(self, name: str, pid: int) -> None:
        """A driver (owner) process the program started, connected to this cluster:
        `KillOwner(name=name)` SIGKILLs it."""
        self._owners[name] = pid

    def elapsed(self) -> float:
        return time.monotonic() - self._t0

    # -- driving the plan ------------------------------------------------------------------
    def _run_clock(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                if self._next >= len(self._events):
                    return
                due = self._events[self._next].at
            if self._stop.wait(max(0.0, self._t0 + due - time.monotonic())):
                return
            self._fire_due(self.elapsed())

    def step(self) -> int:
        """Advance a step plan by one (call before each operation); returns the step number."""
        if self.plan.unit != "step":
            raise ZmeshError("step() drives plans in steps; this plan runs on the clock")
        self._step += 1
        self._fire_due(float(self._step))
        return self._step

    def _fire_due(self, now: float) -> None:
        with self._lock:
            while self._next < len(self._events) and self._events[self._next].at <= now:
                event = self._events[self._next]
                self._next += 1
                try:
                    self._apply(event)
                except Exception as exc:  # a fault that cannot be applied is recorded, not fatal
                    self._note(f"{event.action} {type(event.fault).__name__}", f"failed: {exc}",
                               applied=False)

    def finish(self) -> None:
        """Fire whatever the plan still has due (a step plan's tail), then undo lasting faults."""
        with self._lock:
            for event in self._events[self._next:]:
                if event.action == "start" and event.at <= self.elapsed():
                    self._apply(event)
            self._next = len(self._events)
            for index in list(self._active):
                self._undo(index, self._active.pop(index))

    def _apply(self, event: FaultEvent) -> None:
        f = event.fault
        if event.action == "end":
            if self._active.pop(event.index, None) is not None:
                self._undo(event.index, f)
            return
        if isinstance(f, KillWorker):
            self._kill_worker(f, event.index)
        elif isinstance(f, KillOwner):
            self._kill_owner(f, event.index)
        elif isinstance(f, KillActor):
            self._kill_actor(f, event.index)
        elif isinstance(f, KillNode):
            self._kill_node(f.node)
        elif isinstance(f, Pause):
            self._active[event.index] = f
            self._pause(f.node)
        elif isinstance(f, (Partition, LinkFault, SlowNode)):
            self._active[event.index] = f
            self._note(type(f).__name__.lower(), f.describe().replace("{u}", self._unit()))
            self._push_links()
        else:  # validated away by plan.check("local")
            raise ZmeshError(f"the local target cannot apply {f!r}")

    def _undo(self, index: int, f: Fault) -> None:
        if isinstance(f, Pause):
            self._resume(f.node)
        elif isinstance(f, (Partition, LinkFault, SlowNode)):
            self._note("heal" if isinstance(f, Partition) else "end",
                       f.describe().replace("{u}", self._unit()))
            self._push_links()

    def _unit(self) -> str:
        return "s" if self.plan.unit == "s" else " steps"

    # -- the actions -----------------------------------------------------------------------
    def _live(self) -> list[int]:
        return [i for i, n in enumerate(self.nodes) if n.alive() and i not in self.killed_nodes]

    def _workers(self, index: int) -> list[dict[str, Any]]:
        if index in self._paused:
            return []  # a stopped node answers nobody; its workers are out of reach of the plan
        rows: list[dict[str, Any]] = self._query(index, "workers")
        return rows

    def _kill_worker(self, f: KillWorker, index: int) -> None:
        rng = self.plan.rng("kill_worker", index)
        live = self._live()
        where = [f.node] if f.node is not None else live
        rows = [(i, w) for i in where if i in live for w in self._workers(i)
                if w["state"] in ("leased", "actor")]
        if not rows:
            self._note("kill worker", f"no busy worker on {where}", applied=False)
            return
        rows.sort(key=lambda r: (r[0], r[1]["pid"]))
        node, w = rows[rng.randrange(len(rows))]
        self._sigkill(w["pid"])
        what = f"actor {w['actor_name']}" if w["actor_name"] else "task"
        self._note("kill worker", f"pid {w['pid']} on node {node} ({what})")

    def _kill_owner(self, f: KillOwner, index: int) -> None:
        if f.name is None:  # any busy worker: the refs it made (puts, its tasks') die with it
            self._kill_worker(KillWorker(at=f.at), index)
            return
        pid = self._owners.get(f.name)
        if pid is None:
            self._note("kill owner", f"no owner named {f.name!r} (add_owner)", applied=False)
            return
        self._sigkill(pid)
        self._note("kill owner", f"{f.name} (pid {pid})")

    def _kill_actor(self, f: KillActor, index: int) -> None:
        rng = self.plan.rng("kill_actor", index)
        rows = [(i, w) for i in self._live() for w in self._workers(i)
                if w["state"] == "actor" and (f.name is None or w["actor_name"] == f.name)]
        if not rows:
            self._note("kill actor", f"no live actor {f.name or ''}".rstrip(), applied=False)
            return
        rows.sort(key=lambda r: (r[0], r[1]["pid"]))
        node, w = rows[rng.randrange(len(rows))]
        self._sigkill(w["pid"])
        self._note("kill actor", f"{w['actor_name']} (pid {w['pid']} on node {node})")

    def _kill_node(self, index: int) -> None:
        node = self.nodes[index]
        if index in self.killed_nodes or not node.alive():
            self._note("kill node", f"node {index} is already dead", applied=False)
            return
        self.killed_nodes.add(index)
        self._paused.discard(index)
        self.cluster.kill_node(node)
        self._note("kill node", f"node {index} (pid {node.pid})")
        self._push_links()

    def _pause(self, index: int) -> None:
        if index in self.killed_nodes or index in self._paused:
            self._note("pause", f"node {index} is dead or paused", applied=False)
            return
        self.cluster.pause_node(self.nodes[index])
        self._paused.add(index)
        self._note("pause", f"node {index} (SIGSTOP)")

    def _resume(self, index: int) -> None:
        if index not in self._paused:
            return
        self.cluster.resume_node(self.nodes[index])
        self._paused.discard(index)
        self._note("resume", f"node {index} (SIGCONT)")
        if index in self._stale:
            self._push_links()

    def _sigkill(self, pid: int) -> None:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def _push_links(self) -> None:
        """Send every live node its cut peers and chaos settings from the active faults."""
        addr = {i: f"tcp://{n.address}" for i, n in enumerate(self.nodes)}
        everyone = set(range(len(self.nodes)))
        blocked: dict[int, set[str]] = {i: set() for i in everyone}
        chaos: dict[int, dict[str, Any]] = {i: {} for i in everyone}
        peers: dict[int, set[str]] = {i: set() for i in everyone}
        for f in self._active.values():
            if isinstance(f, Partition):
                side = set(f.side)
                for i in everyone:
                    blocked[i] |= {addr[j] for j in (everyone - side if i in side else side)}
                continue
            if isinstance(f, SlowNode):
                f = LinkFault(at=f.at, kind="delay", rate=1.0, duration=f.duration,
                              delay=f.delay, between=(f.node,))
            if not isinstance(f, LinkFault):
                continue
            chosen = set(f.between) if f.between is not None else everyone
            for i in everyone:  # messages to or from a chosen node: each sender faults its own
                targets = everyone - {i} if i in chosen else chosen - {i}
                if targets:
                    _merge_link(chaos[i], f)
                    peers[i] |= {addr[j] for j in targets}
        for i in self._live():
            if i in self._paused:
                self._stale.add(i)
                continue
            if chaos[i]:  # faults touch messages to other nodes, never query replies
                chaos[i]["peers"] = sorted(peers[i])
            self._query(i, "block", msgspec.msgpack.encode(sorted(blocked[i])))
            self._query(i, "chaos", msgspec.msgpack.encode(chaos[i]))
            self._stale.discard(i)

    def _query(self, index: int, what: str, arg: bytes = b"") -> Any:
        if self._querier is None:
            raise ZmeshError("the local cluster is closed")
        return self._querier.query(self.nodes[index].address, what, arg, timeout=10.0)

    def _note(self, action: str, detail: str, applied: bool = True) -> None:
        self.injected.append(Injected(round(self.elapsed(), 3), action, detail, applied))

    # -- reading ---------------------------------------------------------------------------
    def faults_injected(self) -> int:
        """Faults that took effect (kills, pauses, cuts, link faults started)."""
        return sum(1 for i in self.injected if i.applied and i.action not in
                   ("resume", "heal", "end"))

    def report(self) -> str:
        lines = [f"{self.faults_injected()} fault(s) injected by plan seed {self.plan.seed}:"]
        return "\n".join(lines + [f"  {i}" for i in self.injected])

    def leaks(self, timeout: float = 10.0) -> list[str]:
        """After `close`: node processes, store directories or fds left behind."""
        deadline = time.monotonic() + timeout
        while True:
            found = [f"node process {pid} is still alive" for pid in self._pids if pid_alive(pid)]
            found += [f"store directory {d} remains" for d in self._store_dirs
                      if os.path.exists(d)]
            found += [f"session directory {n.session_dir} remains" for n in self.nodes
                      if os.path.exists(n.session_dir)]
            found += _child_processes()
            extra = _fd_count() - self._fds_before
            if extra > 0:
                found.append(f"{extra} more fd(s) open than before the cluster started")
            if not found or time.monotonic() > deadline:
                return found
            self._stop.wait(0.1)


def _merge_link(cfg: dict[str, Any], f: LinkFault) -> None:
    """Fold one link fault into a node's chaos settings (rates of the same kind combine)."""
    if f.kind == "delay":
        cfg["delay"] = max(cfg.get("delay", 0.0), f.delay)
        cfg["delay_rate"] = 1 - (1 - cfg.get("delay_rate", 0.0)) * (1 - f.rate)
    else:
        cfg[f.kind] = 1 - (1 - cfg.get(f.kind, 0.0)) * (1 - f.rate)
    if f.messages is None or cfg.get("kinds", []) is None:
        cfg["kinds"] = None
    else:
        cfg["kinds"] = sorted(set(cfg.get("kinds") or []) | set(f.messages))


def _fd_count() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


def _child_processes() -> list[str]:
    try:
        import psutil
    except ImportError:
        return []
    out = []
    for child in psutil.Process().children(recursive=True):
        try:
            cmd = " ".join(child.cmdline())
        except psutil.Error:
            continue
        if "zmesh" in cmd:
            out.append(f"zmesh process {child.pid} is still alive ({cmd[:80]})")
    return out


@contextmanager
def local_cluster(nodes: int = 3, faults: FaultPlan | None = None, *, seed: int = 0,
                  num_cpus: float = 2, connect: bool = True,
                  namespace: str | None = None) -> Iterator[LocalCluster]:
    """A `LocalCluster` for the length of a `with` block, running `faults` (none by default)."""
    plan = faults if faults is not None else FaultPlan(seed=seed, nodes=nodes)
    with LocalCluster(nodes, plan, num_cpus=num_cpus, connect=connect,
                      namespace=namespace) as mesh:
        yield mesh
