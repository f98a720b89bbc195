"""Who may say a placement group was removed: its coordinator, or a node that took the
coordinator for dead — and then only to askers that also see the coordinator gone."""

from __future__ import annotations

from typing import Any

from zmesh.core.scheduling import PGRemoved
from zmesh.protocol.messages import placement as p
from zmesh.runtime.node.groups import GroupRelay

C, X, Y = "tcp://c:1", "tcp://x:1", "tcp://y:1"


class _Loop:
    def __init__(self) -> None:
        self.sent: list[tuple[str, Any]] = []

    def on(self, *_: Any) -> None:
        pass

    def send(self, to: str, msg: Any) -> bool:
        self.sent.append((to, msg))
        return True

    def call_later(self, *_: Any) -> None:
        pass


class _Scheduler:
    def __init__(self, coordinated: bool) -> None:
        self.coordinated = coordinated
        self.removed: list[str] = []
        self.held = {"pg"}  # (prepared before its coordinator commits, as on a real node)

    def commit_bundles(self, *_: Any) -> list[Any]:
        return []

    def holds_bundles(self, pg_id: str) -> bool:
        return pg_id in self.held

    def remove_placement_group(self, pg_id: str) -> list[Any]:
        self.removed.append(pg_id)
        self.held.discard(pg_id)
        return [PGRemoved(pg_id, (), self.coordinated)]

    def placement_groups(self) -> list[Any]:
        return []

    def groups_preparing(self) -> bool:
        return False


class _Mesh:
    def __init__(self, dead: set[str]) -> None:
        self.node_address = {"c": C, "x": X, "y": Y}
        self.dead_nodes = dead


class _Node:
    def __init__(self, node_id: str, dead: set[str], coordinated: bool = False) -> None:
        self.node_id = node_id
        self.loop = _Loop()
        self.scheduler = _Scheduler(coordinated)
        self.mesh = _Mesh(dead)
        self.stopping = False
        self.groups = GroupRelay(self)  # type: ignore[arg-type]

    def apply(self, decisions: list[Any]) -> None:
        for d in decisions:
            self.groups.on_decision(d)


def _answer(node: _Node, asker: str) -> Any:
    node.loop.sent.clear()
    node.groups._on_lookup(asker, p.LookupGroup(pg_id="pg"), [])
    return [msg for to, msg in node.loop.sent if to == asker]


def test_a_node_that_took_the_coordinator_for_dead_says_so_in_its_answer() -> None:
    x = _Node("x", dead={"c"})
    x.groups._on_commit(C, p.CommitBundles(pg_id="pg", nodes=["x"], bundles=[{"CPU": 1}]), [])
    assert _answer(x, Y) == []  # holding its bundles, not coordinating: no word from it
    x.groups.node_gone("c", C)
    assert x.scheduler.removed == ["pg"]
    [layout] = _answer(x, Y)
    assert (layout.state, layout.coordinator) == ("removed", C)


def test_an_asker_that_sees_the_coordinator_alive_ignores_that_word() -> None:
    y = _Node("y", dead=set())
    y.groups._on_layout(X, p.GroupLayout(pg_id="pg", state="removed", coordinator=C), [])
    assert y.scheduler.removed == []  # the live coordinator answers for its group itself
    dead = _Node("y", dead={"c"})
    dead.groups._on_layout(X, p.GroupLayout(pg_id="pg", state="removed", coordinator=C), [])
    assert dead.scheduler.removed == ["pg"]


def test_the_coordinator_and_those_it_told_answer_removed_outright() -> None:
    c = _Node("c", dead=set(), coordinated=True)
    c.groups.release("pg")
    [layout] = _answer(c, Y)
    assert (layout.state, layout.coordinator) == ("removed", "")
    x = _Node("x", dead=set())
    x.groups._on_commit(C, p.CommitBundles(pg_id="pg", nodes=["x"], bundles=[{"CPU": 1}]), [])
    x.groups._on_release(C, p.ReleaseBundles(pg_id="pg"), [])
    [layout] = _answer(x, Y)
    assert (layout.state, layout.coordinator) == ("removed", "")


def test_a_commit_of_bundles_released_meanwhile_is_answered_with_bundles_lost() -> None:
    # (it took the coordinator for dead and released them; committing nothing, the
    # coordinator would count them as held here and their tasks would wait for good)
    x = _Node("x", dead=set())
    x.scheduler.held.clear()
    x.groups._on_commit(C, p.CommitBundles(pg_id="pg", nodes=["x"], bundles=[{"CPU": 1}]), [])
    assert [type(msg).__name__ for to, msg in x.loop.sent if to == C] == ["BundlesLost"]
