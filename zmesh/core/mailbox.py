"""An actor's mailbox: calls from each caller are released in their sequence order.

Sans-IO: `deliver` takes a call with (caller, seq) and returns the calls now runnable, in
order. A call that arrives early waits for the ones before it; a duplicate is dropped.
"""

from __future__ import annotations

from typing import Generic, TypeVar

T = TypeVar("T")


class Mailbox(Generic[T]):
    """Per-caller sequencing of calls."""

    def __init__(self) -> None:
        self._next: dict[str, int] = {}
        self._early: dict[str, dict[int, T]] = {}

    def deliver(self, caller: str, seq: int, call: T) -> list[T]:
        """Accept a call; return the calls that may run now, in submission order."""
        expected = self._next.get(caller, 0)
        if seq < expected:
            return []  # a duplicate of a call already released
        if seq > expected:
            self._early.setdefault(caller, {})[seq] = call
            return []
        out = [call]
        expected += 1
        early = self._early.get(caller)
        while early and expected in early:
            out.append(early.pop(expected))
            expected += 1
        self._next[caller] = expected
        return out

    def released(self, caller: str, seq: int) -> bool:
        """Whether the call (caller, seq) was released already (a repeat of it is a
        duplicate: its caller sent it again, not having heard back)."""
        return seq < self._next.get(caller, 0)

    def waiting(self) -> int:
        """How many calls wait for an earlier one."""
        return sum(len(v) for v in self._early.values())

    def reset(self) -> None:
        """Forget every caller (the actor restarted)."""
        self._next.clear()
        self._early.clear()
