"""The collective watchdog's timing, driven on a virtual clock: its waits advance the clock,
a simulated peer beats on the same schedule the watchdog keeps (the interval it waits, plus
its beat's own store round trips, plus lateness), so no real time passes and no sleep stands
in for anything. A healthy member must never be declared dead, however small the group's
`dead_after_s` (down to the smallest value accepted); a silent one must be, in time."""

from __future__ import annotations

import math
import threading
from typing import Any

import pytest

from zmesh.collective import group as group_mod
from zmesh.collective.group import CollectiveGroup

ROUND_TRIPS_S = 0.005  # one beat's own store round trips, on either member


class VirtualWorld:
    """A shared store and a clock. The peer (rank 1) beats as our watchdog does: its next
    beat comes one watchdog interval (what our watchdog asked to wait) after the last one
    ended, `late_s` later on every other beat, and never after `dies_at`."""

    def __init__(self, late_s: float, stop_at: float, dies_at: float = math.inf) -> None:
        self.now = 0.0
        self.keys: dict[str, bytes] = {}
        self.late_s = late_s
        self.stop_at = stop_at
        self.dies_at = dies_at
        self.peer_next: float | None = None
        self.peer_beats = 0
        self.last_peer_beat = 0.0
        self.waits: list[float] = []

    # the store, as the watchdog uses it
    def set(self, key: str, value: str) -> None:
        self.keys[key] = value.encode()
        self.now += ROUND_TRIPS_S / 2

    def peek(self, key: str) -> bytes | None:
        self.now += ROUND_TRIPS_S / 2
        return self.keys.get(key)

    # the watchdog's stop event: its wait is where virtual time passes
    def wait(self, timeout: float | None = None) -> bool:
        assert timeout is not None and timeout > 0
        self.waits.append(timeout)
        if self.peer_next is None:
            self.peer_next = self.now + timeout / 2  # out of phase with us
        end = self.now + timeout
        while self.peer_next <= end and self.peer_next < self.dies_at:
            self.peer_beats += 1
            self.keys["hb/1"] = str(self.peer_beats).encode()
            self.last_peer_beat = self.peer_next
            late = self.late_s if self.peer_beats % 2 else 0.0
            self.peer_next += ROUND_TRIPS_S + timeout + late
        self.now = end
        return self.now >= self.stop_at

    def is_set(self) -> bool:
        return self.now >= self.stop_at


def _watchdog(world: VirtualWorld, dead_after_s: float,
              monkeypatch: pytest.MonkeyPatch) -> CollectiveGroup:
    """A member's group without torch's process group: only what the watchdog touches."""
    g: Any = CollectiveGroup.__new__(CollectiveGroup)
    g.name, g.nonce, g.rank, g.world_size = "g", "n", 0, 2
    g.dead_after_s = dead_after_s
    g.broken = ""
    g._lock = threading.Lock()
    g._pending = set()
    g._stop = world
    g._monitor_store = world
    g.store = world
    broke_at: list[float] = []
    original = CollectiveGroup.break_group

    def break_group(reason: str) -> None:
        broke_at.append(world.now)
        original(g, reason)

    g.break_group = break_group
    g.broke_at = broke_at
    monkeypatch.setattr(group_mod.time, "monotonic", lambda: world.now)
    return g


@pytest.mark.parametrize("dead_after_s", [1.0, 1.5, 2.0, 3.0, 15.0])
def test_a_member_beating_late_is_not_declared_dead(dead_after_s, monkeypatch):
    # every other beat of the peer comes 0.45 * dead_after_s late (a stalled loop turn, a
    # GC pause): well within dead_after_s, so the member is alive
    world = VirtualWorld(late_s=0.45 * dead_after_s, stop_at=200 * dead_after_s)
    g = _watchdog(world, dead_after_s, monkeypatch)
    g._watch()
    assert g.broken == "", f"declared dead at t={g.broke_at} of {world.now:g}: {g.broken}"
    assert world.peer_beats > 100


@pytest.mark.parametrize("dead_after_s", [1.0, 3.0, 15.0])
def test_a_silent_member_is_declared_dead_soon_after_dead_after_s(dead_after_s, monkeypatch):
    world = VirtualWorld(late_s=0.0, stop_at=100 * dead_after_s, dies_at=10 * dead_after_s)
    g = _watchdog(world, dead_after_s, monkeypatch)
    g._watch()
    assert "member rank 1 stopped answering" in g.broken
    (broke_at,) = g.broke_at
    silent_for = broke_at - world.last_peer_beat
    assert dead_after_s < silent_for <= dead_after_s + 2 * max(world.waits) + 0.1


@pytest.mark.parametrize("dead_after_s", [1.0, 2.0, 3.0, 15.0, 100.0])
def test_the_watchdog_beats_a_quarter_of_dead_after_s_at_most_once_a_second(dead_after_s,
                                                                          monkeypatch):
    world = VirtualWorld(late_s=0.0, stop_at=10 * dead_after_s)
    g = _watchdog(world, dead_after_s, monkeypatch)
    g._watch()
    assert set(world.waits) == {min(1.0, dead_after_s / 4)}


@pytest.mark.parametrize("bad", [0, -1.0, 0.5, 0.99, math.nan, "3", None])
def test_a_dead_after_s_the_watchdog_cannot_keep_is_refused_before_the_rendezvous(bad,
                                                                                 monkeypatch):
    import zmesh.collective as col
    from zmesh.collective import rendezvous

    def no_rendezvous(*_a: Any) -> None:
        raise AssertionError("reached the rendezvous with a dead_after_s it cannot keep")

    monkeypatch.setattr(rendezvous, "open_store", no_rendezvous)
    with pytest.raises(ValueError, match="dead_after_s"):
        col.init_collective_group(2, 0, "gloo", "g", dead_after_s=bad)
