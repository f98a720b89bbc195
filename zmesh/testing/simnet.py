"""A deterministic simulated network and clock for sans-IO cores (membership, control store).

A core is any object with `tick(now)`, `receive(now, sender, message)` and `next_deadline()`;
both handlers return the messages to send as `(destination, message)` pairs. SimNet delivers
them with seeded latency, drops, partitions, crashes and pauses, so a run is reproducible
from its seed.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

Outbox = Iterable[tuple[str, object]]


class SansIONode(Protocol):
    """What SimNet needs of a core: timers and message handling, returning messages to send."""

    def tick(self, now: float) -> Outbox: ...

    def receive(self, now: float, sender: str, message: object) -> Outbox: ...

    def next_deadline(self) -> float | None: ...


@dataclass(order=True)
class _Event:
    at: float
    seq: int
    kind: str = field(compare=False)  # "deliver" or "tick"
    dest: str = field(compare=False)
    sender: str = field(compare=False, default="")
    message: object = field(compare=False, default=None)


class SimNet:
    """Seeded network of sans-IO nodes on a virtual clock; nothing here sleeps or uses sockets."""

    def __init__(
        self,
        seed: int = 0,
        *,
        latency: tuple[float, float] = (0.0005, 0.002),
        drop_rate: float = 0.0,
    ) -> None:
        self.rng = random.Random(seed)
        self.latency = latency
        self.drop_rate = drop_rate
        self.now = 0.0
        self.nodes: dict[str, SansIONode] = {}
        self.crashed: set[str] = set()
        self.paused: set[str] = set()
        self._cut: set[frozenset[str]] = set()
        self._queue: list[_Event] = []
        self._seq = itertools.count()
        self._armed: dict[str, float] = {}
        self._held: dict[str, list[_Event]] = {}
        self.sent: Counter[str] = Counter()
        self.delivered = 0

    # -- topology and faults -------------------------------------------------------------
    def add(self, name: str, node: SansIONode) -> None:
        """Add a node; its timers start now."""
        self.nodes[name] = node
        self.crashed.discard(name)
        self._arm(name)

    def crash(self, name: str) -> None:
        """The node stops: it sends and receives nothing from now on."""
        self.crashed.add(name)

    def pause(self, name: str) -> None:
        """The node is frozen (SIGSTOP): messages to it wait until resume, timers do not fire."""
        self.paused.add(name)

    def resume(self, name: str) -> None:
        """Unfreeze a paused node: it receives what queued up and its timers run again."""
        self.paused.discard(name)
        for ev in self._held.pop(name, []):
            ev.at = self.now
            heapq.heappush(self._queue, ev)
        self._arm(name)

    def partition(self, side_a: Iterable[str], side_b: Iterable[str]) -> None:
        """Cut every link between the two sets of nodes (both directions)."""
        for a in side_a:
            for b in side_b:
                self._cut.add(frozenset((a, b)))

    def heal(self) -> None:
        """Restore every cut link."""
        self._cut.clear()

    # -- message flow --------------------------------------------------------------------
    def inject(self, dest: str, sender: str, message: object, delay: float = 0.0) -> None:
        """Deliver a message from outside the simulation (a client request, say)."""
        heapq.heappush(
            self._queue, _Event(self.now + delay, next(self._seq), "deliver", dest, sender, message)
        )

    def _send(self, sender: str, outbox: Outbox) -> None:
        for dest, message in outbox:
            self.sent[sender] += 1
            if frozenset((sender, dest)) in self._cut or self.rng.random() < self.drop_rate:
                continue
            at = self.now + self.rng.uniform(*self.latency)
            heapq.heappush(self._queue, _Event(at, next(self._seq), "deliver", dest, sender, message))

    def _arm(self, name: str) -> None:
        node = self.nodes[name]
        deadline = node.next_deadline()
        if deadline is None or name in self.crashed or name in self.paused:
            return
        deadline = max(deadline, self.now)
        if self._armed.get(name) == deadline:
            return
        self._armed[name] = deadline
        heapq.heappush(self._queue, _Event(deadline, next(self._seq), "tick", name))

    def step(self) -> bool:
        """Process the next event; False when nothing is left to do."""
        if not self._queue:
            return False
        ev = heapq.heappop(self._queue)
        self.now = max(self.now, ev.at)
        name = ev.dest
        if name not in self.nodes or name in self.crashed:
            return True
        if name in self.paused:
            if ev.kind == "deliver":
                self._held.setdefault(name, []).append(ev)
            return True
        node = self.nodes[name]
        if ev.kind == "tick":
            if self._armed.get(name) != ev.at:
                return True  # superseded by a newer deadline
            del self._armed[name]
            self._send(name, node.tick(self.now))
        else:
            self.delivered += 1
            self._send(name, node.receive(self.now, ev.sender, ev.message))
        self._arm(name)
        return True

    def run_until(self, t: float) -> None:
        """Advance the clock to `t`, processing every event due before it."""
        while self._queue and self._queue[0].at <= t:
            self.step()
        self.now = max(self.now, t)

    def run_for(self, seconds: float) -> None:
        """Advance the clock by `seconds`."""
        self.run_until(self.now + seconds)
