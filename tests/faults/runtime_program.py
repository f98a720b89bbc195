"""Random Ray-style programs under random fault schedules, run on the simulated mesh.

A schedule is a list of steps: operations (tasks, chains, nested fan-out, puts, borrowed
refs, refs returned from inside tasks, borrowed refs returned to the caller (given as
arguments, or borrowed from a third worker: `hand_on`, run by test_borrow_hand_off.py, with
`ctor`: an actor keeping such a ref from its constructor's argument),
actors with restarts and numbered calls, placement groups, gets, dropped refs) mixed with faults (kill a worker, an actor, a node or an owner;
pause a node; partition and heal; drop, duplicate, delay and reorder messages; slow a node).
`run_schedule` runs one and returns the violations it saw; the invariants are listed on
`Checker`.
"""

from __future__ import annotations

import gc
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from fault_history import (
    FaultHistory,
    actor_of,
    actors_on,
    describe,
    live_workers,
    watch_verdicts,
)
from get_judge import Failed, judge

import zmesh
from zmesh.errors import GetTimeoutError, ZmeshError
from zmesh.runtime import context
from zmesh.testing import SimDeadlock, SimMesh, sim_mesh
from zmesh.util.placement_group import placement_group, remove_placement_group
from zmesh.util.scheduling_strategies import PlacementGroupSchedulingStrategy

GET_BOUND_S = 30.0  # virtual seconds a get may take once its faults have ended
SHORT_GET_BOUND_S = 5.0  # once messages were lost for good, or one get hung: wait less
CLEAN_BOUND_S = 60.0  # virtual seconds for everything to be released once no ref is left
# Liveness is strict: every get resolves (a value or a documented error) within the bound and
# everything is released once no ref is left, after kills, pauses and partitions too. With it,
# 200 schedules had 10 failing seeds; the fixes kept in test_liveness_regressions.py (a
# borrowed ref whose owning worker died, a duplicated ForwardLease, leases lost in a partition
# or after a pause, an actor forwarded back to its home; later a forwarded lease's ForwardLease
# or grant lost, or a stale "alive" from an actor's killed worker) leave no seed excused: the
# last one listed here (1841481400, leases left 'remote' on n0 after a pause of the driver's
# node with a node kill) is no longer among the 200 schedules and none of them fails with
# KNOWN_LIVENESS_BUGS empty. A seed listed here has its liveness failures counted and printed
# as "liveness failures after kills/pauses/partitions", not violations; --lenient-liveness
# treats every such failure that way.
# Liveness holds after lost and reordered messages too (`lossy_liveness`, `lossy_release`):
# every get resolves within GET_BOUND_S and everything is released. Until then it was
# excused once a `link` rule with drop or reorder was set, even if it dropped nothing: that
# excused 3 hangs with nothing lost (seed 105553 among them); with real losses no get of the
# 200 schedules timed out, but 2 left something held (a lost "done" of a forwarded lease, a
# lost layout of a rescheduled group), and a schedule shrunk from seed 197 a third (a lost
# LeaseGranted): all fixed and kept in test_liveness_regressions.py.
KNOWN_LIVENESS_BUGS: dict[int, str] = {}
strict_liveness = True
lossy_liveness = True  # False: a get that times out after a real drop/reorder is excused
lossy_release = True  # False: no release check at the end after a real drop/reorder
NODES = ("n0", "n1", "n2")

totals: Counter[str] = Counter()  # printed at the end of the run by tests/conftest.py
# every failed get of the run (kind, error, excuse or None, the schedule's disruptions): for
# seed loops (tools/fault_seed_loop.py) that log the unexcused ones with their schedules
failed_gets: list[dict[str, Any]] = []
liveness_seeds: list[int] = []  # schedules with open liveness failures (printed too)


@zmesh.remote(max_retries=3)
def add(x: int, d: int = 1) -> int:
    return x + d


@zmesh.remote(max_retries=3)
def tree(depth: int, width: int, base: int) -> int:
    if depth == 0:
        return base
    return sum(zmesh.get([tree.remote(depth - 1, width, base * width + i)
                          for i in range(width)]))


def tree_value(depth: int, width: int, base: int) -> int:
    if depth == 0:
        return base
    return sum(tree_value(depth - 1, width, base * width + i) for i in range(width))


@zmesh.remote(max_retries=3)
def deref(box: list[Any]) -> Any:
    return zmesh.get(box[0])


@zmesh.remote(max_retries=3)
def relay(box: list[Any]) -> list[Any]:
    return [box[0]]  # a ref it only borrows, handed back to its caller inside the return


@zmesh.remote(max_retries=3)
def make_inner(v: int) -> list[Any]:
    return [zmesh.put(v)]


@zmesh.remote(max_retries=3)
def make_big(v: int) -> list[Any]:
    return [zmesh.put(_value(200_000, v))]  # stored: a leak shows in the node's store


@zmesh.remote(max_retries=3)
def hand_on(v: int) -> list[Any]:
    # a ref another worker owns, handed on to the caller (the owner is told first)
    return [zmesh.get(make_big.remote(v))[0]]


@zmesh.remote
class CtorHolder:
    """Keeps a ref given inside its constructor's argument for its life (restarts too):
    the return of a `hand_on`, whose value holds a ref a third worker owns."""

    def __init__(self, boxes: list[Any]) -> None:
        self.box = boxes[0]

    def read(self) -> Any:
        return zmesh.get(zmesh.get(self.box)[0])


@zmesh.remote
class Log:
    """Numbered calls from one caller; answers (incarnation, every number seen since)."""

    def __init__(self) -> None:
        # each incarnation runs in a worker process of its own: its address names it
        self.incarnation = context.current_client().address
        self.seen: list[int] = []

    def push(self, k: int) -> tuple[str, list[int]]:
        self.seen.append(k)
        return self.incarnation, list(self.seen)


def _value(n: int, v: int) -> np.ndarray:
    return np.full(n, v, dtype=np.int64)


@dataclass
class Pending:
    """One operation whose result is still to be checked."""

    kind: str
    ref: Any
    expected: Any
    actor: int = -1
    k: int = -1
    deref: bool = False  # the value is a list holding a ref: check what it points at
    group: Any = None  # the placement group it runs in: removing it may fail the task
    t0: float = 0.0  # virtual time it was submitted
    holder: int = -1  # a CtorHolder read: the holder's index in Checker.holders


@dataclass
class ActorRec:
    handle: Any
    restarts: int
    retries: int
    made: float = 0.0
    next_k: int = 0
    results: dict[int, tuple[str, list[int]]] = field(default_factory=dict)
    failed: set[int] = field(default_factory=set)


class Checker:
    """Runs one schedule and checks, after every step and at the end:

    - every `get` gives the right value or a documented zmesh error (a `ZmeshError`) within
      GET_BOUND_S virtual seconds once faults stop; with no fault before it, the right value;
      a failed get must be excused by what the faults did (`get_judge.judge`: a put of the
      driver is not lost, a task fails only after more worker deaths than its retries, an
      actor call only after its actor died past its restarts or task retries, a worker's
      object only once its owner died...), not merely be a documented error: counting any
      ZmeshError hid tasks placed on a node back from a false death that read the driver's
      puts as lost (bc84a3b, caught by the real-process chaos run instead);
    - an actor's numbered calls run in order: each answer's list is increasing, and every
      call answered by the same incarnation before it is in it (no gap in one incarnation);
    - resources are never negative or above a node's total (`SimMesh.validate`, which also
      runs every core's `validate()`);
    - once every ref, handle and group is dropped, nothing stays owned by the driver, stored
      on a live node, leased, or held, within CLEAN_BOUND_S.

    All of it holds after dropped and reordered messages too (`lossy_liveness`,
    `lossy_release`): what a lost message would leave undone is asked or sent again (ZeroMQ
    over tcp loses what was queued on a connection that broke).
    """

    def __init__(self, mesh: SimMesh, seed: int = -1) -> None:
        self.mesh = mesh
        self.seed = seed
        self.pending: list[Pending] = []
        self.puts: list[tuple[Any, np.ndarray]] = []
        self.actors: list[ActorRec] = []
        self.groups: list[Any] = []
        # CtorHolder handles, the value they hold, when they were made
        self.holders: list[tuple[Any, int, float]] = []
        self.removed_groups: set[bytes] = set()
        self.group_made: dict[bytes, float] = {}  # group id -> virtual time it was made
        self.violations: list[str] = []
        self.faulted = False
        self.killed = False  # a process was killed, a node paused or partitioned away
        self.hung = False  # a get already hung in this schedule
        self.open_bugs: list[str] = []
        self.stats: Counter[str] = Counter()
        self.history = FaultHistory()
        watch_verdicts(mesh, self.history)

    # -- steps -----------------------------------------------------------------------------
    def step(self, step: tuple[Any, ...]) -> None:
        mesh = self.mesh
        mesh.note(f"step {step}")
        self.stats["steps"] += 1
        submitted = len(self.pending)
        self._step(step)
        for p in self.pending[submitted:]:
            p.t0 = mesh.now if p.holder < 0 else self.holders[p.holder][2]
        self.validate()

    def _step(self, step: tuple[Any, ...]) -> None:
        mesh = self.mesh
        kind = step[0]
        if kind == "task":
            self.pending.append(Pending("task", add.remote(step[1]), step[1] + 1))
        elif kind == "chain":
            ref = add.remote(step[1])
            for _ in range(step[2] - 1):
                ref = add.remote(ref)
            self.pending.append(Pending("chain", ref, step[1] + step[2]))
        elif kind == "tree":
            self.pending.append(Pending("tree", tree.remote(step[1], step[2], 1),
                                        tree_value(step[1], step[2], 1)))
        elif kind == "put":
            value = _value(step[1], step[2])
            self.puts.append((zmesh.put(value), value))
        elif kind == "borrow" and self.puts:
            ref, value = self.puts[step[1] % len(self.puts)]
            self.pending.append(Pending("borrow", deref.remote([ref]), value))
        elif kind == "relay" and self.puts:
            ref, value = self.puts[step[1] % len(self.puts)]
            self.pending.append(Pending("relay", relay.remote([ref]), value, deref=True))
        elif kind == "hand_on":
            self.pending.append(Pending("hand_on", hand_on.remote(step[1]),
                                        _value(200_000, step[1]), deref=True))
        elif kind == "ctor":  # an actor whose constructor gets a ref a third worker owns
            holder = CtorHolder.options(max_restarts=1,  # type: ignore[attr-defined]
                                        max_task_retries=1).remote([hand_on.remote(step[1])])
            self.holders.append((holder, step[1], mesh.now))
            self.pending.append(Pending("ctor", holder.read.remote(), _value(200_000, step[1]),
                                        holder=len(self.holders) - 1))
        elif kind == "ctor_read" and self.holders:
            i = step[1] % len(self.holders)
            holder, v, _ = self.holders[i]
            self.pending.append(Pending("ctor", holder.read.remote(), _value(200_000, v),
                                        holder=i))
        elif kind == "inner":
            self.pending.append(Pending("inner", make_inner.remote(step[1]), step[1],
                                        deref=True))
        elif kind == "actor":
            handle = Log.options(max_restarts=step[1],  # type: ignore[attr-defined]
                                 max_task_retries=step[2]).remote()
            self.actors.append(ActorRec(handle, step[1], step[2], mesh.now))
        elif kind == "call" and self.actors:
            i = step[1] % len(self.actors)
            rec = self.actors[i]
            k = rec.next_k
            rec.next_k += 1
            self.pending.append(Pending("call", rec.handle.push.remote(k), None, actor=i, k=k))
        elif kind == "pg":
            # One live group at most: a group holds a CPU, and once n1 and n2 are killed two
            # groups would hold all of n0's, so plain tasks would wait forever, rightly (as
            # in Ray), and that is the program's doing, not the runtime's.
            if self.groups:
                pg = self.groups[-1]
            else:
                pg = placement_group([{"CPU": 1}], strategy="PACK")
                self.groups.append(pg)
                self.group_made[pg.id] = mesh.now
            strategy = PlacementGroupSchedulingStrategy(pg, 0)
            self.pending.append(Pending("pg", add.options(
                scheduling_strategy=strategy).remote(step[1]), step[1] + 1, group=pg.id))
        elif kind == "unpg" and self.groups:
            pg = self.groups.pop(step[1] % len(self.groups))
            self.removed_groups.add(pg.id)
            remove_placement_group(pg)
        elif kind == "get" and self.pending:
            self.resolve(self.pending.pop(step[1] % len(self.pending)))
        elif kind == "forget" and self.pending:
            self.pending.pop(step[1] % len(self.pending))
        elif kind == "advance":
            mesh.advance(step[1])
        else:
            self.fault(step)

    def _killed(self, what: str, address: str | None, workers: dict[str, Any]) -> None:
        if address is not None and address in workers:
            node, state, actor_id, info = workers[address]
            self.history.kill(what, self.mesh.now, node, address, actor_id, state, info=info)

    def fault(self, step: tuple[Any, ...]) -> None:
        mesh = self.mesh
        kind = step[0]
        before = mesh.faults_injected
        workers = live_workers(mesh) if kind.startswith("kill") else {}
        if kind == "kill_worker":
            self._killed("kill_worker", mesh.kill_worker(), workers)
        elif kind == "kill_actor" and self.actors:
            handle = self.actors[step[1] % len(self.actors)].handle
            if mesh.kill_actor(handle):
                self.history.kill("kill_actor", mesh.now, actor_id=actor_of(handle))
        elif kind == "kill_node" and step[1] in mesh.live_nodes():
            actors = actors_on(mesh, step[1])
            mesh.kill_node(step[1])
            self.history.kill("kill_node", mesh.now, step[1], actors=actors)
        elif kind == "kill_owner":
            owners = [p.ref for p in self.pending if p.kind == "inner" and p.ref is not None]
            inner = [r for r in owners if _ready(r)]
            if inner:
                try:
                    box = zmesh.get(inner[step[1] % len(inner)], timeout=SHORT_GET_BOUND_S)
                except ZmeshError:
                    box = None  # failed or slow: checked when it is resolved
                if box is not None and mesh.kill_owner(box[0]):
                    self._killed("kill_owner", box[0].owner, workers)
        elif kind == "pause" and step[1] in mesh.live_nodes():
            mesh.pause_node(step[1])
            mesh.after(step[2], lambda name=step[1]: mesh.resume_node(name))
        elif kind == "partition":
            mesh.partition({step[1]}, set(NODES) - {step[1]})
            mesh.after(step[2], mesh.heal)
        elif kind == "link":
            _, drop, dup, delay, reorder, dur = step
            rule = mesh.link_faults(drop=drop, duplicate=dup, delay=delay, reorder=reorder)
            mesh.after(dur, lambda: mesh.net.rules.remove(rule) if rule in mesh.net.rules
                       else None)
        elif kind == "link_kinds":  # faults on some kinds of message only
            _, kinds, drop, dup, reorder, dur = step
            rule = mesh.link_faults(drop=drop, duplicate=dup, reorder=reorder, kinds=kinds)
            mesh.after(dur, lambda: mesh.net.rules.remove(rule) if rule in mesh.net.rules
                       else None)
        elif kind == "slow":
            mesh.slow_node(step[1], step[2])
            mesh.after(step[3], lambda name=step[1]: mesh.slow_node(name, 0.0))
        if mesh.faults_injected > before:
            self.faulted = True
            self.killed = self.killed or kind.startswith("kill") or kind in ("pause",
                                                                               "partition")

    @property
    def lossy(self) -> bool:
        """A message was really dropped or reordered so far (not merely a rule that could)."""
        stats = self.mesh.net.stats
        return bool(stats["dropped"] or stats["reordered"])

    # -- checks ----------------------------------------------------------------------------
    def validate(self) -> None:
        try:
            self.mesh.validate()
        except AssertionError as exc:
            self.violate(f"invariant: {exc}")

    def liveness(self, text: str) -> None:
        """A liveness failure: a violation, unless it came after a kill in a schedule with a
        known open bug (or with strict_liveness off)."""
        if self.killed and (not strict_liveness or self.seed in KNOWN_LIVENESS_BUGS):
            self.open_bugs.append(f"t={self.mesh.now:.3f}s {text}")
            self.mesh.note(f"LIVENESS FAILURE (after a kill/pause/partition) {text}")
        else:
            self.violate(text)

    def violate(self, text: str) -> None:
        self.violations.append(f"t={self.mesh.now:.3f}s {text}")
        self.mesh.note(f"VIOLATION {text}")

    def resolve(self, p: Pending) -> None:
        self.stats["gets"] += 1
        faulted = self.faulted
        stage, inner_owner = "result", ""
        try:
            excused = self.lossy and not lossy_liveness
            bound = SHORT_GET_BOUND_S if excused or self.hung else GET_BOUND_S
            value = zmesh.get(p.ref, timeout=bound)
            if p.deref:
                stage, inner_owner = "deref", value[0].owner
                value = zmesh.get(value[0], timeout=bound)
        except GetTimeoutError as exc:
            self.stats["timeouts"] += 1
            if not excused:
                self.hung = True
                self.liveness(f"{p.kind} get did not finish in {bound:.0f}s: {exc}")
            return
        except SimDeadlock as exc:
            self.liveness(f"{p.kind} get deadlocked the simulation: {exc}")
            return
        except ZmeshError as exc:
            self.stats["errors"] += 1
            if p.kind == "call":
                self.actors[p.actor].failed.add(p.k)
            if not faulted and p.group not in self.removed_groups:
                self.violate(f"{p.kind} failed with no fault injected: {exc!r}")
                return
            self.judge_failure(p, exc, stage, inner_owner)
            return
        except Exception as exc:  # noqa: BLE001 - any other error is undocumented
            self.violate(f"{p.kind} raised an undocumented {type(exc).__name__}: {exc}")
            return
        self.stats["values"] += 1
        if p.kind == "call":
            self.check_call(p, value)
        elif isinstance(p.expected, np.ndarray):
            if not (isinstance(value, np.ndarray) and np.array_equal(value, p.expected)):
                self.violate(f"{p.kind} returned a wrong value")
        elif value != p.expected:
            self.violate(f"{p.kind} returned {value!r}, expected {p.expected!r}")

    def judge_failure(self, p: Pending, exc: ZmeshError, stage: str, inner_owner: str) -> None:
        """A get failed after a fault: excused only if the faults let it fail (get_judge)."""
        failed = Failed(p.kind, exc, p.t0, self.mesh.now, stage, inner_owner,
                        inner_owner_alive=inner_owner in live_workers(self.mesh),
                        group_removed=p.group is not None and p.group in self.removed_groups,
                        group_made=self.group_made.get(p.group))
        if p.kind == "call":
            rec = self.actors[p.actor]
            failed.actor_id, failed.actor_made = actor_of(rec.handle), rec.made
            failed.restarts, failed.task_retries = rec.restarts, rec.retries
        elif p.kind == "ctor":
            holder = self.holders[p.holder][0]
            failed.actor_id, failed.actor_made = actor_of(holder), p.t0
            failed.restarts, failed.task_retries = 1, 1
        why = judge(failed, self.history)
        failed_gets.append({"seed": self.seed, "kind": p.kind, "stage": stage,
                            "error": type(exc).__name__, "message": str(exc)[:300],
                            "t0": p.t0, "t1": self.mesh.now, "excuse": why,
                            "history": describe(self.history)})
        if why is not None:
            self.stats["excused"] += 1
            self.mesh.note(f"{p.kind} failed, excused: {why}: {type(exc).__name__}")
        else:
            self.stats["unexcused"] += 1
            actor = f" (restarts {failed.restarts}, task retries {failed.task_retries})" \
                if failed.actor_id else ""
            self.violate(f"{p.kind}{actor} ({stage}) failed with {type(exc).__name__} and no "
                         "fault "
                         f"excuses it (submitted at t={p.t0:.3f}s; faults: "
                         f"{describe(self.history) or 'no process died'}): {exc}")

    def check_call(self, p: Pending, value: Any) -> None:
        rec = self.actors[p.actor]
        incarnation, seen = value
        if p.k not in seen or seen[-1] != p.k:
            self.violate(f"actor {p.actor} call {p.k} answered with {seen}")
        if any(a >= b for a, b in zip(seen, seen[1:])):
            self.violate(f"actor {p.actor} ran calls out of order: {seen}")
        for k, (inc, _) in rec.results.items():
            if inc == incarnation and k < p.k and k not in seen:
                self.violate(f"actor {p.actor} incarnation {incarnation} answered call {k} "
                             f"but call {p.k} does not see it: {seen}")
        rec.results[p.k] = (incarnation, seen)

    def finish(self) -> None:
        """Faults stop; every pending op is checked; then every ref is dropped and the mesh
        must release everything."""
        mesh = self.mesh
        mesh.heal()
        mesh.net.rules.clear()
        mesh.net.slow.clear()
        for name in mesh.node_names:
            mesh.resume_node(name)
        while self.pending:
            self.resolve(self.pending.pop(0))
            self.validate()
        self.pending.clear()
        self.puts.clear()
        self.actors.clear()
        self.holders.clear()
        while self.groups:  # (a loop variable would keep the last group's ready ref alive)
            remove_placement_group(self.groups.pop())
        gc.collect()
        if self.lossy and not lossy_release:
            return
        for _ in range(int(CLEAN_BOUND_S / 0.5)):  # polled: leftovers() is not cheap
            if not leftovers(mesh):
                return
            mesh.advance(0.5)
        left = leftovers(mesh)  # (after the last step too: it reported [] when that freed all)
        if left:
            self.liveness(f"not released once every ref was gone: {left}")


def _ready(ref: Any) -> bool:
    return bool(zmesh.wait([ref], timeout=0)[0])


def leftovers(mesh: SimMesh) -> list[str]:
    """What is still owned, stored, leased or held when nothing should be."""
    out = []
    driver = mesh.driver
    assert driver is not None
    owned = [oid.hex()[:12] for oid, e in driver.objects.entries.items()]
    if owned:
        out.append(f"driver holds {len(owned)} objects {owned[:4]}")
    for name, n in mesh.nodes.items():
        if not n.alive:
            continue
        node = n.node
        stats = node.store.stats()
        if stats.num_objects:
            out.append(f"{name} stores {stats.num_objects} objects")
        if stats.num_pinned:  # (a freed object stays while pinned: not in num_objects)
            out.append(f"{name} keeps {stats.num_pinned} objects pinned")
        if node.leases:
            out.append(f"{name} has {len(node.leases)} leases: " + ", ".join(
                f"{le.name} of {le.owner} ({'granted' if le.worker else 'remote' if le.remote else 'waiting'})"
                for le in node.leases.values()))
        total, free = node.scheduler.total(), node.scheduler.available()
        if free.get("CPU", 0.0) + 1e-9 < total.get("CPU", 0.0):
            out.append(f"{name} CPU {free.get('CPU')} of {total.get('CPU')} free")
    return out


def run_schedule(seed: int, steps: list[tuple[Any, ...]]) -> tuple[list[str], SimMesh]:
    """Run one schedule on a fresh 3-node mesh; the violations and the mesh (closed)."""
    with sim_mesh(nodes=len(NODES), seed=seed, stall_limit=3 * GET_BOUND_S) as mesh:
        checker = Checker(mesh, seed)
        try:
            for step in steps:
                checker.step(step)
            checker.finish()
        except SimDeadlock as exc:
            checker.liveness(f"the program deadlocked the simulation: {exc}")
        totals["schedules"] += 1
        totals["steps"] += checker.stats["steps"]
        totals["faults injected"] += mesh.faults_injected
        totals["gets checked"] += checker.stats["gets"]
        totals["gets failed (documented errors)"] += checker.stats["errors"]
        totals["gets failed, excused by a fault"] += checker.stats["excused"]
        totals["gets failed, unexcused (violations)"] += checker.stats["unexcused"]
        totals["gets timed out (messages lost)"] += checker.stats["timeouts"] if checker.lossy \
            else 0
        totals["liveness failures after kills/pauses/partitions"] += len(checker.open_bugs)
        totals["schedules with such liveness failures"] += bool(checker.open_bugs)
        totals["messages"] += mesh.net.stats["sent"]
        totals["violations"] += len(checker.violations)
        if checker.open_bugs:
            liveness_seeds.append(seed)
        return checker.violations, mesh
