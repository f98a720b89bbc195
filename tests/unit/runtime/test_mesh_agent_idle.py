"""The node's membership shell on a hand-driven loop: what a node alone keeps armed."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from zmesh.protocol.messages.membership import Join, MemberState, MemberUpdate, Metadata
from zmesh.runtime.node.mesh import PUBLISH_PERIOD_S, MeshAgent


class HandLoop:
    """call_later/call_soon recorded; `run_due()` runs what is due on a virtual clock."""

    def __init__(self) -> None:
        self.now = 0.0
        self.timers: list[tuple[float, Callable[[], Any]]] = []
        self.sent: list[tuple[str, Any]] = []

    def clock(self) -> float:
        return self.now

    def on(self, cls: type, handler: Any) -> None:
        pass

    def send(self, to: str, msg: Any) -> bool:
        self.sent.append((to, msg))
        return True

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        self.timers.append((self.now, lambda: fn(*args)))

    def call_later(self, delay: float, fn: Callable[[], Any]) -> None:
        self.timers.append((self.now + delay, fn))

    def call_when_idle(self, fn: Callable[[], Any], max_wait: float) -> None:
        self.timers.append((self.now, fn))  # no inbox here: at once

    def run_until(self, until: float) -> None:
        while True:
            due = [t for t in self.timers if t[0] <= until]
            if not due:
                self.now = until
                return
            first = min(due, key=lambda t: t[0])
            self.timers.remove(first)
            self.now = max(self.now, first[0])
            first[1]()


def agent(loop: HandLoop, free: dict[str, float]) -> MeshAgent:
    return MeshAgent(loop, "tcp://a:1", "node-a", total=lambda: {"CPU": 2.0},  # type: ignore[arg-type]
                     free=lambda: dict(free), labels={}, ipc_address="ipc:///a", pid=1,
                     on_view=lambda view: None, on_gone=lambda *a: None,
                     rng=random.Random(0))


def test_a_node_alone_keeps_no_timer_and_publishes_once_a_member_joins() -> None:
    # Alone, a node checked its free resources 10 times a second and ran membership timers
    # ~6 times a second, with nobody to tell: its idle CPU.
    loop = HandLoop()
    free = {"CPU": 2.0}
    mesh = agent(loop, free)
    mesh.start([])
    loop.run_until(5.0)
    assert loop.timers == [], "nothing armed while alone"
    free["CPU"] = 1.0  # a task took a CPU while alone
    joiner = MemberUpdate("tcp://b:1", MemberState.ALIVE, 0, Metadata(0, {}, {}))
    mesh._on_message("tcp://b:1", Join(joiner), [])
    loop.run_until(5.0 + 2 * PUBLISH_PERIOD_S)
    told = [u.metadata.resources for to, msg in loop.sent if to == "tcp://b:1"
            for u in getattr(msg, "updates", getattr(msg, "members", []))
            if u.address == "tcp://a:1" and u.metadata is not None]
    assert told and told[-1]["CPU"] == 1.0, told
    assert any(fn == mesh._publish for _, fn in loop.timers), "publishing while it has a peer"
