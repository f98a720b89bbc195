"""What a random fault schedule did to which process, and when (runtime_program.Checker).

Kills of a worker, an owner, an actor or a node, as the Checker injects them, and the
nodes the mesh took for dead, from the nodes' own membership verdicts (pauses, partitions
and slow links lead to them only sometimes): `get_judge` reads it to decide which failed
gets the faults excuse.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from zmesh.testing import SimMesh

SETTLE_S = 10.0  # virtual seconds a kill's consequences may take (the owner timeout: 10 s)
# ... and a false death's once its node is counted alive again: the node hears of its death
# and stops its workers, and the owners hear it is back (NodeBack), within a round or two
BACK_SETTLE_S = 2.0


@dataclass
class Disruption:
    """One fault that ended processes: `what` is kill_worker, kill_owner, kill_actor,
    kill_node or taken_for_dead; it acts from t0 to t1 (t1 = inf while a node taken for
    dead is not back)."""

    what: str
    t0: float
    t1: float
    node: str = ""
    address: str = ""
    actor_id: bytes = b""
    state: str = ""  # a killed worker's state: leased, actor, idle...
    actors: frozenset[bytes] = frozenset()  # a node's: the actors its workers ran then
    back: float = math.inf  # a node taken for dead: when a member counted it alive again
    # a killed worker's record on its node (WorkerInfo): a node that has not handled the
    # exit yet (paused) may still give the dead worker an actor to restart on, which then
    # dies again; its actor_id says so afterwards
    info: Any = None
    observers: set[str] = field(default_factory=set)  # who takes the node for dead now


@dataclass
class FaultHistory:
    """What the schedule's faults did, to whom and when (filled in by the Checker)."""

    disruptions: list[Disruption] = field(default_factory=list)
    open_deaths: dict[str, Disruption] = field(default_factory=dict)  # node taken for dead

    def kill(self, what: str, now: float, node: str = "", address: str = "",
             actor_id: bytes = b"", state: str = "",
             actors: frozenset[bytes] = frozenset(), info: Any = None) -> None:
        self.disruptions.append(Disruption(what, now, now + SETTLE_S, node, address,
                                           actor_id, state, actors, info=info))

    def killed_node_seen(self, node: str, observer: str, now: float,
                         actors: frozenset[bytes]) -> None:
        """Member `observer` declared dead `node`, which was killed: the actors placed there
        by then (on their way to a worker too) die now."""
        self.disruptions.append(Disruption("kill_node_seen", now, now + SETTLE_S, node,
                                           actors=actors, observers={observer}))

    def taken_for_dead(self, node: str, observer: str, now: float,
                       actors: frozenset[bytes]) -> None:
        """Member `observer` declared `node` dead (the first verdict opens the record)."""
        d = self.open_deaths.get(node)
        if d is None:
            d = self.open_deaths[node] = Disruption("taken_for_dead", now, math.inf, node,
                                                    actors=actors)
            self.disruptions.append(d)
        d.observers.add(observer)

    def alive_to(self, observer: str, dead: set[str], now: float) -> None:
        """Member `observer` takes the nodes in `dead` for dead and every other for alive:
        a record closes once every member that declared its node dead counts it alive."""
        for node, d in list(self.open_deaths.items()):
            if node not in dead:
                d.observers.discard(observer)
            if not d.observers:
                del self.open_deaths[node]
                d.back, d.t1 = now, now + BACK_SETTLE_S

    def during(self, t0: float, t1: float) -> list[Disruption]:
        """The disruptions acting at some moment of [t0, t1]."""
        return [d for d in self.disruptions if d.t0 <= t1 and d.t1 >= t0]


def node_of(address: str) -> str:
    """The node name in a simulated process address (sim://n1/w1003 -> n1)."""
    rest = address.removeprefix("sim://")
    return rest.split("/", 1)[0]


def describe(history: FaultHistory) -> list[str]:
    """The disruptions, one line each (for a failing schedule's report)."""
    return [" ".join(x for x in (d.what, d.node, d.address, d.state, d.actor_id.hex()[:8],
                                 ",".join(a.hex()[:8] for a in sorted(d.actors)),
                                 f"t={d.t0:.3f}..{d.t1:.3f}") if x)
            for d in history.disruptions]


def actor_of(handle: Any) -> bytes:
    return bytes(getattr(handle, "_actor_id", b""))


def watch_verdicts(mesh: SimMesh, history: FaultHistory) -> None:
    """Record every node's membership verdicts (a member declared dead, counted alive
    again) in the fault history: pauses, partitions and slow links take nodes for dead
    only sometimes, and what a get may fail with depends on whether they did. (Wraps the
    mesh agents' callbacks: test-only instrumentation.)"""
    names = {n.node.node_id: name for name, n in mesh.nodes.items()}

    def gone(observer: str, node_id: str, *_: Any) -> None:
        name = names.get(node_id)
        if name is None:
            return
        if mesh.nodes[name].alive:
            history.taken_for_dead(name, observer, mesh.now, actors_on(mesh, name))
        else:
            history.killed_node_seen(name, observer, mesh.now,
                                          actors_on(mesh, name, observer))

    def view(observer: str, agent: Any, *_: Any) -> None:
        dead = {names[i] for i in agent.dead_nodes if i in names}
        history.alive_to(observer, dead, mesh.now)

    for name, n in mesh.nodes.items():
        agent = n.node.mesh
        if agent is None:
            continue
        # (the verdict is recorded before the node acts on it, the view after)
        agent._on_gone = _chain(partial(gone, name), agent._on_gone)
        agent._on_view = _chain(agent._on_view, partial(view, name, agent))


def _chain(first: Any, then: Any) -> Any:
    """A callback calling `first`, then `then` (if any), with the same arguments."""
    def both(*args: Any) -> None:
        first(*args)
        if then is not None:
            then(*args)
    return both


def live_workers(mesh: SimMesh) -> dict[str, tuple[str, str, bytes, Any]]:
    """Each live worker's address -> (node, state, actor id, its WorkerInfo), taken before
    a kill."""
    return {proc.client.address: (name, info.state, bytes(info.actor_id or b""), info)
            for name, n in mesh.nodes.items() if n.alive for info, proc in n.pool.live()}


def actors_on(mesh: SimMesh, name: str, by: str | None = None) -> frozenset[bytes]:
    """The actors node `name` runs or was given to run now: its live workers' (if it
    lives), and those a live node (or node `by` only) placed there (its own, or forwarded
    to it)."""
    target = mesh.nodes[name]
    out = {bytes(info.actor_id) for info, _ in target.pool.live()
           if target.alive and info.state == "actor" and info.actor_id}
    for node_name, n in mesh.nodes.items():
        if not n.alive or by not in (None, node_name):
            continue
        for actor_id, e in n.node.actors.actors.items():
            if not e.proxy and e.state != "dead" and (
                    e.remote == target.node.address or (n is target and not e.remote)):
                out.add(bytes(actor_id))
    return frozenset(out)
