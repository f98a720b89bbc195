"""A fault-injecting wrapper for any Endpoint: seeded drop, duplicate, delay and reorder.

Every send draws the same four numbers from `random.Random(seed)`, whatever the fault rates,
so the same seed and the same sequence of sends give every message the same fate. Delayed
and held-back messages wait in a heap at the sender and go out from inside later `send` or
`recv` calls once due; there is no background thread.
"""

from __future__ import annotations

import heapq
import itertools
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from zmesh.errors import TransportError

from .base import Buffer, Endpoint

__all__ = ["ChaosEndpoint", "Fate"]


@dataclass(frozen=True)
class Fate:
    """What the chaos layer decided for one message, in send order (for tests and logs)."""

    seq: int
    to: str
    dropped: bool
    copies: int
    delay: float
    held_back: bool


class ChaosEndpoint(Endpoint):
    """Wraps `inner` and applies seeded faults to what it sends; recv passes through.

    `drop`, `duplicate` and `reorder` are probabilities per message; `delay` is a
    (min, max) range in seconds drawn uniformly per message. A reordered message is held
    back until the next message to the same peer has gone out (or `hold` seconds pass),
    so the two arrive swapped. Closing discards what is still held: those messages were
    in flight when the process went away. Closing the wrapper closes `inner`.
    """

    def __init__(
        self,
        inner: Endpoint,
        seed: int,
        drop: float = 0.0,
        duplicate: float = 0.0,
        delay: tuple[float, float] = (0.0, 0.0),
        reorder: float = 0.0,
        *,
        hold: float = 0.05,
        record: bool = False,
        delay_rate: float = 1.0,
        select: Callable[[str, Sequence[Buffer]], bool] | None = None,
    ) -> None:
        self.inner = inner
        self.address = inner.address
        self.seed = seed
        self.stats: Counter[str] = Counter()
        self.configure(drop, duplicate, delay, reorder, hold=hold, delay_rate=delay_rate,
                       select=select)
        self.fates: list[Fate] | None = [] if record else None
        self._rng = random.Random(seed)
        self._seq = itertools.count()
        self._lock = threading.Lock()
        # (due time, tie-break, peer, frames): sends waiting for their delay to pass.
        self._timers: list[tuple[float, int, str, list[Buffer]]] = []
        # peer -> (deadline, frames...) held back for reordering.
        self._held: dict[str, tuple[float, list[list[Buffer]]]] = {}
        self._woken = False
        # Not tracked as live itself: it holds no resource but `inner`, which is tracked.

    def configure(self, drop: float = 0.0, duplicate: float = 0.0,
                  delay: tuple[float, float] = (0.0, 0.0), reorder: float = 0.0, *,
                  hold: float = 0.05, delay_rate: float = 1.0,
                  select: Callable[[str, Sequence[Buffer]], bool] | None = None) -> None:
        """Set the fault rates from now on (the seeded draws go on where they were).

        `delay_rate` is the share of messages delayed; `select(to, frames)`, when given,
        picks the messages subject to faults (the others pass straight through).
        """
        for name, rate in (("drop", drop), ("duplicate", duplicate), ("reorder", reorder),
                           ("delay_rate", delay_rate)):
            if not 0.0 <= rate <= 1.0:
                raise ValueError(f"chaos {name} rate must be within [0, 1], got {rate}")
        low, high = delay
        if not 0.0 <= low <= high:
            raise ValueError(f"chaos delay must be (min, max) with 0 <= min <= max, got {delay}")
        if hold < 0:
            raise ValueError(f"chaos hold must be >= 0 seconds, got {hold}")
        self.drop, self.duplicate, self.delay, self.reorder = drop, duplicate, delay, reorder
        self.hold, self.delay_rate, self.select = hold, delay_rate, select
        self._faulty = drop > 0 or duplicate > 0 or (high > 0 and delay_rate > 0) or reorder > 0

    @property
    def closed(self) -> bool:
        return self.inner.closed

    def __getattr__(self, name: str) -> Any:
        # Optional extras of the inner transport (send_back, close_idle) pass through as they
        # are: the runtime looks them up with getattr and they carry no faults.
        if name.startswith("_") or name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def pending(self) -> int:
        """Messages delayed or held back and not yet handed to the inner endpoint."""
        with self._lock:
            return len(self._timers) + sum(len(copies) for _, copies in self._held.values())

    def send(self, to: str, frames: Sequence[Buffer]) -> None:
        if self.inner.closed:
            raise TransportError(f"endpoint {self.address!r} is closed; cannot send to {to!r}")
        if not self._faulty or (self.select is not None and not self.select(to, frames)):
            self.inner.send(to, frames)
            if self._timers or self._held:
                self._flush(time.monotonic())
            return
        if not frames:
            raise TransportError(f"message to {to!r} has no frames; send at least one")
        now = time.monotonic()
        with self._lock:
            fate = self._decide(to)
        self.stats["sent"] += 1
        if fate.dropped:
            self.stats["dropped"] += 1
            return
        copies = [list(frames) for _ in range(fate.copies)]
        self.stats["duplicated"] += fate.copies - 1
        out: list[list[Buffer]] = []
        with self._lock:
            if fate.delay > 0:
                self.stats["delayed"] += 1
                for copy in copies:
                    heapq.heappush(self._timers, (now + fate.delay, next(self._seq), to, copy))
            elif fate.held_back and to not in self._held:
                self.stats["reordered"] += 1
                self._held[to] = (now + self.hold, copies)
            else:
                out = copies
                released = self._held.pop(to, None)
                if released is not None:
                    out = out + released[1]
        for copy in out:
            self.inner.send(to, copy)
        self._flush(now)

    def _decide(self, to: str) -> Fate:
        rng = self._rng
        # Always draw all four so one message's fate never shifts the next one's draws.
        u_drop, u_dup, u_delay, u_reorder = rng.random(), rng.random(), rng.random(), rng.random()
        low, high = self.delay
        fate = Fate(
            seq=next(self._seq),
            to=to,
            dropped=u_drop < self.drop,
            copies=2 if u_dup < self.duplicate else 1,
            # One draw decides both whether and how long: delayed below delay_rate, the
            # amount spread over (low, high) by where the draw fell.
            delay=(low + (high - low) * u_delay / self.delay_rate
                   if high > 0 and u_delay < self.delay_rate else 0.0),
            held_back=u_reorder < self.reorder,
        )
        if self.fates is not None:
            self.fates.append(fate)
        return fate

    def _flush(self, now: float) -> None:
        """Hand every message whose delay or hold has run out to the inner endpoint."""
        due: list[tuple[str, list[Buffer]]] = []
        with self._lock:
            timers = self._timers
            while timers and timers[0][0] <= now:
                _, _, to, frames = heapq.heappop(timers)
                due.append((to, frames))
            for to in [peer for peer, (deadline, _) in self._held.items() if deadline <= now]:
                due.extend((to, copy) for copy in self._held.pop(to)[1])
        for to, frames in due:
            try:
                self.inner.send(to, frames)
            except TransportError:
                # The peer went away while the message was delayed: it is lost, as on a wire.
                self.stats["lost"] += 1

    def _next_due(self) -> float | None:
        with self._lock:
            candidates = [deadline for deadline, _ in self._held.values()]
            if self._timers:
                candidates.append(self._timers[0][0])
        return min(candidates) if candidates else None

    def flush(self) -> None:
        """Send everything delayed or held back now, ignoring remaining delays."""
        self._flush(float("inf"))

    def recv(self, timeout: float | None = None) -> tuple[str, list[Buffer]] | None:
        if not self._faulty and not self._timers and not self._held:
            return self.inner.recv(timeout)
        deadline = None if timeout is None else time.monotonic() + max(timeout, 0.0)
        while True:
            now = time.monotonic()
            self._flush(now)
            wait = None if deadline is None else max(0.0, deadline - now)
            next_due = self._next_due()
            if next_due is not None:
                wait = max(0.0, next_due - now) if wait is None else min(wait, next_due - now)
            message = self.inner.recv(None if wait is None else max(wait, 0.0))
            if message is not None:
                return message
            if self._woken:
                self._woken = False
                return None
            if deadline is not None and time.monotonic() >= deadline:
                return None

    def wake(self) -> None:
        self._woken = True
        self.inner.wake()

    def disconnect(self, peer: str) -> None:
        self.inner.disconnect(peer)

    def close(self) -> None:
        with self._lock:
            self._timers.clear()
            self._held.clear()
        self.inner.close()
