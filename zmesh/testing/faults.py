"""Fault plans: a seeded, serialisable schedule of faults that any test target replays exactly.

A `FaultPlan` lists faults, each at a time (seconds since the run started) or a step number
(the index of the user's operation before which it fires). Nodes are named by their index in
the target (0 is the head node); workers and actors are picked at run time by a generator
seeded from the plan, so the same plan against the same program picks the same victims.

    plan = FaultPlan(seed=7, nodes=3, faults=(KillWorker(at=2.0), Partition(at=4.0, side=(2,),
                                                                         duration=1.5)))
    print(plan)                      # one line per fault, in time order
    FaultPlan.from_json(plan.to_json()) == plan
    plan.validate("local")           # [] or the faults this target cannot express, and why

Faults that last (`Pause`, `Partition`, `LinkFault`, `SlowNode`) carry a duration and undo
themselves; `events()` expands a plan into the timeline of start and end actions.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal, Union

import msgspec

__all__ = [
    "Fault", "FaultEvent", "FaultPlan", "FaultPlanError", "KillActor", "KillNode", "KillOwner",
    "KillWorker", "LinkFault", "Pause", "Partition", "SlowNode", "TARGETS", "TargetCaps",
    "Unit",
]

Unit = Literal["s", "step"]
LinkKind = Literal["drop", "duplicate", "delay", "reorder"]


class FaultPlanError(ValueError):
    """A plan is malformed, or holds faults its target cannot express (the message lists them)."""


class _Fault(msgspec.Struct, frozen=True, tag_field="fault", kw_only=True):
    at: float

    def describe(self) -> str:
        raise NotImplementedError

    def end(self) -> float | None:
        """When a lasting fault is undone (None for one-shot faults)."""
        duration = getattr(self, "duration", None)
        return None if duration is None else self.at + duration


class KillWorker(_Fault, frozen=True, tag="kill_worker"):
    """SIGKILL one worker process (task or actor) on `node`, or on any node when None."""

    node: int | None = None

    def describe(self) -> str:
        return f"kill a worker on {_node(self.node)} (SIGKILL)"


class KillActor(_Fault, frozen=True, tag="kill_actor"):
    """SIGKILL the worker of actor `name`, or of any live actor when None."""

    name: str | None = None

    def describe(self) -> str:
        return f"kill actor {self.name!r} (SIGKILL)" if self.name else "kill an actor (SIGKILL)"


class KillNode(_Fault, frozen=True, tag="kill_node"):
    """SIGKILL node `node` (its workers die with it); it does not come back."""

    node: int

    def describe(self) -> str:
        return f"kill node {self.node} (SIGKILL)"


class KillOwner(_Fault, frozen=True, tag="kill_owner"):
    """SIGKILL a driver/owner process `name` (one the target started for the program)."""

    name: str | None = None

    def describe(self) -> str:
        return f"kill owner {self.name!r} (SIGKILL)" if self.name else "kill an owner (SIGKILL)"


class Pause(_Fault, frozen=True, tag="pause"):
    """SIGSTOP node `node` for `duration`, then SIGCONT."""

    node: int
    duration: float

    def describe(self) -> str:
        return f"pause node {self.node} for {self.duration:g}{{u}} (SIGSTOP/SIGCONT)"


class Partition(_Fault, frozen=True, tag="partition"):
    """Cut the nodes in `side` off from all the others (both ways) for `duration`, then heal."""

    side: tuple[int, ...]
    duration: float

    def describe(self) -> str:
        return f"partition nodes {list(self.side)} from the rest for {self.duration:g}{{u}}"


class LinkFault(_Fault, frozen=True, tag="link"):
    """For `duration`, `kind` (drop/duplicate/delay/reorder) messages at `rate`.

    `between` limits it to messages to or from those nodes (None: every node); `messages` to those
    message kinds (class names such as "PushTask"; None: every kind). `delay` is the extra
    latency of a delayed message, in seconds.
    """

    kind: LinkKind
    rate: float
    duration: float
    between: tuple[int, ...] | None = None
    messages: tuple[str, ...] | None = None
    delay: float = 0.05

    def describe(self) -> str:
        what = f"{self.kind} {self.rate:.0%} of messages"
        if self.kind == "delay":
            what += f" by {self.delay:g}s"
        if self.messages:
            what += f" of kinds {list(self.messages)}"
        if self.between is not None:
            what += f" to or from nodes {list(self.between)}"
        return f"{what} for {self.duration:g}{{u}}"


class SlowNode(_Fault, frozen=True, tag="slow_node"):
    """Delay everything node `node` sends by `delay` seconds, for `duration`."""

    node: int
    duration: float
    delay: float = 0.2

    def describe(self) -> str:
        return f"slow node {self.node} (+{self.delay:g}s per message) for {self.duration:g}{{u}}"


Fault = Union[KillWorker, KillActor, KillNode, KillOwner, Pause, Partition, LinkFault, SlowNode]
FAULT_TYPES: tuple[type[_Fault], ...] = (KillWorker, KillActor, KillNode, KillOwner, Pause,
                                          Partition, LinkFault, SlowNode)


def _node(index: int | None) -> str:
    return "any node" if index is None else f"node {index}"


@dataclass(frozen=True)
class FaultEvent:
    """One action of a plan's timeline: `start` or `end` (undo) of `fault`, at `at`."""

    at: float
    action: Literal["start", "end"]
    fault: Fault
    index: int  # the fault's position in the plan


@dataclass(frozen=True)
class TargetCaps:
    """What a test target can express: fault types, link fault kinds, and its limits."""

    name: str
    faults: frozenset[str]
    link_kinds: frozenset[str]
    message_filters: bool
    units: frozenset[str]
    notes: dict[str, str]

    def problems(self, fault: Fault, unit: Unit) -> list[str]:
        tag = type(fault).__struct_config__.tag
        if tag not in self.faults:
            return [self.notes.get(str(tag), f"the {self.name} target has no {tag} fault")]
        out = []
        if unit not in self.units:
            out.append(f"the {self.name} target schedules faults in "
                       f"{' or '.join(sorted(self.units))}, not {unit!r}")
        if isinstance(fault, KillNode) and fault.node == 0:
            out.append("node 0 hosts the driver (the program under test): kill another node")
        if isinstance(fault, LinkFault):
            if fault.kind not in self.link_kinds:
                out.append(f"the {self.name} target cannot {fault.kind} messages")
            if fault.messages and not self.message_filters:
                out.append(f"the {self.name} target cannot pick messages by kind")
        return out


TARGETS: dict[str, TargetCaps] = {
    "local": TargetCaps(
        "local", frozenset(["kill_worker", "kill_actor", "kill_node", "kill_owner", "pause",
                            "partition", "link", "slow_node"]),
        frozenset(["drop", "duplicate", "delay", "reorder"]), True, frozenset(["s", "step"]),
        {}),
    "sim": TargetCaps(
        "sim", frozenset(["kill_worker", "kill_actor", "kill_node", "kill_owner", "pause",
                          "partition", "link", "slow_node"]),
        frozenset(["drop", "duplicate", "delay", "reorder"]), True, frozenset(["s", "step"]),
        {}),
}


# Target name -> how to start a plan on that target's mesh (zmesh.testing.sim_faults
# registers "sim"; kept as a registry so this module imports no target).
DRIVERS: dict[str, Callable[[FaultPlan, Any], Any]] = {}


class FaultPlan(msgspec.Struct, frozen=True, kw_only=True):
    """A seeded schedule of faults for `nodes` nodes; times in seconds or step numbers."""

    seed: int
    nodes: int = 3
    faults: tuple[Fault, ...] = ()
    unit: Unit = "s"

    def __post_init__(self) -> None:
        problems = []
        if self.nodes < 1:
            problems.append(f"a plan needs at least one node, got nodes={self.nodes}")
        for i, f in enumerate(self.faults):
            problems += [f"fault {i} ({f.describe().replace('{u}', self.unit)}): {p}"
                         for p in _shape_problems(f, self.nodes)]
        if problems:
            raise FaultPlanError("; ".join(problems))
        ordered = tuple(sorted(self.faults, key=lambda f: f.at))
        if ordered != self.faults:
            msgspec.structs.force_setattr(self, "faults", ordered)

    # -- reading ---------------------------------------------------------------------------
    def __str__(self) -> str:
        head = (f"FaultPlan(seed={self.seed}, nodes={self.nodes}, "
                f"{len(self.faults)} fault{'s' if len(self.faults) != 1 else ''})")
        unit = "s" if self.unit == "s" else " steps"
        lines = [head]
        for f in self.faults:
            when = f"t={f.at:g}s" if self.unit == "s" else f"step {int(f.at)}"
            lines.append(f"  {when:>9}  {f.describe().replace('{u}', unit)}")
        return "\n".join(lines)

    def events(self) -> list[FaultEvent]:
        """Start and end actions in time order (ends before starts at the same instant)."""
        out = []
        for i, f in enumerate(self.faults):
            out.append(FaultEvent(f.at, "start", f, i))
            end = f.end()
            if end is not None:
                out.append(FaultEvent(end, "end", f, i))
        return sorted(out, key=lambda e: (e.at, e.action == "start", e.index))

    def count(self) -> dict[str, int]:
        """How many faults of each kind the plan holds."""
        counts: dict[str, int] = {}
        for f in self.faults:
            tag = str(type(f).__struct_config__.tag)
            counts[tag] = counts.get(tag, 0) + 1
        return counts

    def rng(self, *salt: object) -> random.Random:
        """A generator for run-time choices (which worker to kill), seeded by the plan."""
        return random.Random(f"{self.seed}:" + ":".join(map(str, salt)))

    # -- targets ---------------------------------------------------------------------------
    def validate(self, target: str) -> list[str]:
        """The reasons `target` cannot run this plan, one per fault it cannot express."""
        caps = TARGETS.get(target)
        if caps is None:
            raise FaultPlanError(f"unknown fault target {target!r}; known: {sorted(TARGETS)}")
        return [f"fault {i} ({f.describe().replace('{u}', self.unit)}): {p}"
                for i, f in enumerate(self.faults) for p in caps.problems(f, self.unit)]

    def check(self, target: str) -> None:
        """Raise FaultPlanError listing every fault `target` cannot express."""
        problems = self.validate(target)
        if problems:
            raise FaultPlanError(f"this plan cannot run on the {target} target: "
                                 + "; ".join(problems))

    # -- serialising -----------------------------------------------------------------------
    def to_json(self) -> str:
        return msgspec.json.encode(self).decode()

    @classmethod
    def from_json(cls, text: str | bytes) -> FaultPlan:
        try:
            return msgspec.json.decode(text, type=cls)
        except msgspec.ValidationError as exc:
            raise FaultPlanError(f"not a fault plan: {exc}") from exc

    def attach(self, mesh: Any) -> None:
        """Schedule this plan on a simulated mesh (`sim_mesh(faults=plan)` calls it)."""
        driver = DRIVERS.get("sim")
        if driver is None:
            raise FaultPlanError("no simulated-mesh driver: import zmesh.testing first")
        mesh.plan_driver = driver(self, mesh)

    def __repr__(self) -> str:  # what hypothesis prints for a falsifying example: pasteable
        return f"FaultPlan.from_json({self.to_json()!r})"

    def replace(self, **changes: object) -> FaultPlan:
        return msgspec.structs.replace(self, **changes)

    @classmethod
    def random(cls, seed: int, *, nodes: int = 3, kill_workers: bool = False,
               kill_actors: bool = False, kill_nodes: bool = False, pauses: bool = False,
               partitions: bool = False, drop: float = 0.0, max_faults: int = 4,
               horizon: float = 5.0) -> FaultPlan:
        """A plan drawn from `seed` alone (same seed, same plan), with the enabled kinds."""
        rng = random.Random(seed)
        kinds = [kind for kind, on in (("kill_worker", kill_workers), ("kill_actor", kill_actors),
                                       ("kill_node", kill_nodes and nodes > 1),
                                       ("pause", pauses), ("partition", partitions and nodes > 1))
                 if on]
        faults: list[Fault] = []
        for _ in range(rng.randint(1, max_faults) if kinds else 0):
            kind, at = rng.choice(kinds), round(rng.uniform(0, horizon), 1)
            span = round(rng.uniform(0.2, horizon / 2), 1)
            if kind == "kill_worker":
                faults.append(KillWorker(at=at))
            elif kind == "kill_actor":
                faults.append(KillActor(at=at))
            elif kind == "kill_node":
                faults.append(KillNode(at=at, node=rng.randrange(1, nodes)))
            elif kind == "pause":
                faults.append(Pause(at=at, node=rng.randrange(nodes), duration=span))
            else:
                side = tuple(sorted(rng.sample(range(nodes), rng.randrange(1, nodes))))
                faults.append(Partition(at=at, side=side, duration=span))
        if drop > 0:
            faults.append(LinkFault(at=0.0, kind="drop", rate=drop, duration=horizon + 1))
        return cls(seed=seed, nodes=nodes, faults=tuple(faults))

    @classmethod
    def of(cls, seed: int, faults: Iterable[Fault], nodes: int = 3,
           unit: Unit = "s") -> FaultPlan:
        return cls(seed=seed, nodes=nodes, faults=tuple(faults), unit=unit)


def _shape_problems(f: _Fault, nodes: int) -> list[str]:
    out = []
    if f.at < 0:
        out.append(f"starts at {f.at}, before the run")
    duration = getattr(f, "duration", None)
    if duration is not None and duration <= 0:
        out.append(f"lasts {duration}, not a positive time")
    for name in ("node",):
        index = getattr(f, name, None)
        if index is not None and not 0 <= index < nodes:
            out.append(f"names node {index} but the plan has nodes 0..{nodes - 1}")
    if isinstance(f, Partition):
        if not f.side or len(set(f.side)) == nodes:
            out.append("a partition needs nodes on both sides")
        bad = [i for i in f.side if not 0 <= i < nodes]
        if bad:
            out.append(f"names nodes {bad} but the plan has nodes 0..{nodes - 1}")
    if isinstance(f, LinkFault):
        if not 0.0 < f.rate <= 1.0:
            out.append(f"rate {f.rate} is not within (0, 1]")
        if f.delay < 0:
            out.append(f"delay {f.delay} is negative")
        bad = [i for i in f.between or () if not 0 <= i < nodes]
        if bad:
            out.append(f"names nodes {bad} but the plan has nodes 0..{nodes - 1}")
    if isinstance(f, SlowNode) and f.delay <= 0:
        out.append(f"delay {f.delay} is not positive")
    return out
