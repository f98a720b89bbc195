"""The simulated target: a FaultPlan scheduled on a `SimMesh`'s virtual clock.

`sim_mesh(..., faults=plan)` calls `plan.attach(mesh)` once the mesh is up; every fault
then fires at `plan time + the time the mesh came up`, in virtual seconds, from the mesh's
own seeded kernel, so a run is a function of the plan and the seed. A plan in steps fires
its faults as the program calls `mesh.step()` before each of its operations. Nodes are "n0", "n1",
...; node 0 hosts the driver and is never killed (validation says so).
"""

from __future__ import annotations

from typing import Any

from zmesh.testing.faults import (
    DRIVERS,
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

__all__ = ["SimFaults"]


class SimFaults:
    """Applies one plan's events to one simulated mesh (on the mesh's kernel thread)."""

    def __init__(self, plan: FaultPlan, mesh: Any) -> None:
        plan.check("sim")
        self.plan, self.mesh = plan, mesh
        self.active: dict[int, Fault] = {}
        self.rules: dict[int, Any] = {}
        self.skipped: list[str] = []

    def schedule(self) -> None:
        if self.plan.unit == "step":  # fired by the program's mesh.step() calls
            self._events = self.plan.events()
            self._next = 0
            self._step = -1
            self.mesh.stepper = self.step
            return
        start = self.mesh.now
        for event in self.plan.events():
            self.mesh.at(start + event.at, lambda e=event: self.apply(e))

    def step(self) -> int:
        """The program's next step begins: fire the events due at it; its number."""
        self._step += 1
        while self._next < len(self._events) and self._events[self._next].at <= self._step:
            self.apply(self._events[self._next])
            self._next += 1
        return self._step

    def _name(self, index: int) -> str:
        return f"n{index}"

    def apply(self, event: FaultEvent) -> None:
        f, mesh = event.fault, self.mesh
        if event.action == "end":
            self.active.pop(event.index, None)
            if isinstance(f, Pause):
                mesh.resume_node(self._name(f.node))
            elif isinstance(f, Partition):
                mesh.heal()
                for other in self.active.values():  # heal() heals all: put the others back
                    if isinstance(other, Partition):
                        self._cut(other)
            elif isinstance(f, LinkFault):
                rule = self.rules.pop(event.index, None)
                if rule is not None and rule in mesh.net.rules:
                    mesh.net.rules.remove(rule)
                    mesh.note(f"link fault ended: {rule}")
            elif isinstance(f, SlowNode):
                mesh.slow_node(self._name(f.node), 0)
            return
        if isinstance(f, KillWorker):
            if f.node is None:
                done = mesh.kill_worker()
            else:
                workers = mesh.workers(self._name(f.node))
                done = mesh.kill_worker(self.plan.rng("kill_worker", event.index).choice(
                    workers)) if workers else None
            if done is None:
                self.skipped.append(f"t={f.at:g}: no worker to kill")
        elif isinstance(f, KillActor):
            ids = self._actors(f.name)
            if ids:
                mesh.kill_actor(self.plan.rng("kill_actor", event.index).choice(ids))
            else:
                self.skipped.append(f"t={f.at:g}: no live actor {f.name or ''}".rstrip())
        elif isinstance(f, KillOwner):
            if f.name is not None:
                if not mesh.kill_owner(f.name):
                    self.skipped.append(f"t={f.at:g}: no owner process at {f.name}")
            elif mesh.kill_worker() is None:  # any worker: the refs it owns die with it
                self.skipped.append(f"t={f.at:g}: no owner process to kill")
        elif isinstance(f, KillNode):
            mesh.kill_node(self._name(f.node))
        elif isinstance(f, Pause):
            self.active[event.index] = f
            mesh.pause_node(self._name(f.node))
        elif isinstance(f, Partition):
            self.active[event.index] = f
            self._cut(f)
        elif isinstance(f, LinkFault):
            self.active[event.index] = f
            rates = {"drop": 0.0, "duplicate": 0.0, "delay": 0.0, "reorder": 0.0}
            rates[f.kind] = f.rate
            hosts = [self._name(i) for i in range(self.plan.nodes)]
            between = None if f.between is None else (
                [self._name(i) for i in f.between], hosts)
            self.rules[event.index] = mesh.link_faults(
                **rates, delay_range=(f.delay, f.delay), kinds=f.messages, between=between)
        elif isinstance(f, SlowNode):
            self.active[event.index] = f
            mesh.slow_node(self._name(f.node), f.delay)

    def _cut(self, f: Partition) -> None:
        side = set(f.side)
        self.mesh.partition([self._name(i) for i in sorted(side)],
                            [self._name(i) for i in range(self.plan.nodes) if i not in side])

    def _actors(self, name: str | None) -> list[bytes]:
        ids: list[bytes] = self.mesh.actor_ids()
        if name is None:
            return ids
        named = set()
        for n in self.mesh.nodes.values():
            for actor_id, entry in n.node.actors.actors.items():
                if name in (entry.spec.name, entry.spec.class_name):
                    named.add(actor_id)
        return [i for i in ids if i in named]


def _start(plan: FaultPlan, mesh: Any) -> SimFaults:
    driver = SimFaults(plan, mesh)
    driver.schedule()
    return driver


DRIVERS["sim"] = _start
