"""One actor's lifecycle on its home node, pure: events in, actions out.

States are an enum; the rule for restarting (`may_restart`) and the rule for killing
(`KillRequested`) are each written once, whoever asks (zmesh.kill, a dead owner, a removed
placement group, a lost owner's node) and whatever died (its worker here, or the node that
hosted it). The node's shell (runtime/node/actors.py) carries the actions out: publish a
state to subscribers, place the actor, stop its worker, release its resources, free its name.
"""

from __future__ import annotations

import enum
from collections import deque
from typing import Union

import msgspec

STORY_LEN = 64
"""Events (with the actions they caused) each actor keeps for `story()`."""


class ActorState(enum.Enum):
    PENDING = "pending"  # placed with the scheduler, not started yet
    ALIVE = "alive"  # its constructor returned; calls go to `address`
    RESTARTING = "restarting"  # it died with restarts left and is being placed again
    DEAD = "dead"  # for good


# -- events ----------------------------------------------------------------------------------
class Started(msgspec.Struct, frozen=True):
    """Its constructor returned on a worker reachable at `address`."""

    address: str


class InitFailed(msgspec.Struct, frozen=True):
    """Its constructor raised: dead for good, whatever restarts are left."""

    reason: str
    error: bytes


class Lost(msgspec.Struct, frozen=True):
    """Its worker died (`here`: on this node, holding this node's resources) or the node that
    hosted it went (`here` False). `stopping`: this node is shutting down (no restarts)."""

    reason: str
    here: bool
    stopping: bool = False


class KillRequested(msgspec.Struct, frozen=True):
    """Something wants it gone: `no_restart` makes that final. `reachable`: a worker here or a
    hosting node can be told to stop it (else it was never started and dies at once)."""

    reason: str
    no_restart: bool
    reachable: bool


class Unschedulable(msgspec.Struct, frozen=True):
    """It cannot be placed (bad request, infeasible for good, name taken)."""

    reason: str


class HostReported(msgspec.Struct, frozen=True):
    """The node hosting it for us reports a state change; we pass it on as it is."""

    state: ActorState
    address: str
    reason: str
    restarts: int
    error: bytes


Event = Union[Started, InitFailed, Lost, KillRequested, Unschedulable, HostReported]


# -- actions ---------------------------------------------------------------------------------
class Publish(msgspec.Struct, frozen=True):
    """Tell the owner and every subscriber the actor's state."""

    state: ActorState
    address: str
    reason: str
    error: bytes
    restarts: int


class Schedule(msgspec.Struct, frozen=True):
    """Place it (again) with the scheduler."""


class StopWorker(msgspec.Struct, frozen=True):
    """Stop its worker here, or ask the hosting node to (with `no_restart`, and why)."""

    no_restart: bool
    reason: str = ""


class Release(msgspec.Struct, frozen=True):
    """Give back what it held on this node to the scheduler (it ran here)."""


class Cancel(msgspec.Struct, frozen=True):
    """Drop its placement request (it never started)."""


class FreeName(msgspec.Struct, frozen=True):
    """Free its name now (Ray frees a killed actor's name at once)."""


Action = Union[Publish, Schedule, StopWorker, Release, Cancel, FreeName]


class ActorLifecycle:
    """The lifecycle of one actor: `handle(event) -> list[Action]`."""

    def __init__(self, max_restarts: int, restarts: int = 0) -> None:
        self.max_restarts = max_restarts
        self.restarts = restarts
        self.state = ActorState.PENDING
        self.address = ""
        self.reason = ""
        self.error = b""
        self.no_restart = False
        self.kill_reason = ""  # why we stopped its worker: that names the death that follows
        self._log: deque[tuple[Event, list[Action]]] = deque(maxlen=STORY_LEN)

    def may_restart(self, stopping: bool = False) -> bool:
        """The restart rule, in one place: not killed for good, restarts left (-1: no limit),
        and this node is not shutting down."""
        limit = self.max_restarts
        return not self.no_restart and not stopping and (limit < 0 or self.restarts < limit)

    def handle(self, event: Event) -> list[Action]:
        actions = self._handle(event)
        self._log.append((event, actions))
        return actions

    def _handle(self, event: Event) -> list[Action]:
        if isinstance(event, HostReported):
            self.restarts = event.restarts
            if event.error:
                self.error = event.error
            return [self._publish(event.state, event.address, event.reason)]
        if self.state is ActorState.DEAD:
            return []
        if isinstance(event, Started):
            return [self._publish(ActorState.ALIVE, event.address)]
        if isinstance(event, InitFailed):
            self.no_restart = True
            self.error = event.error
            return [self._publish(ActorState.DEAD, reason=event.reason), Release(),
                    StopWorker(no_restart=True)]
        if isinstance(event, Unschedulable):
            return [self._publish(ActorState.DEAD, reason=event.reason)]
        if isinstance(event, KillRequested):
            self.no_restart = self.no_restart or event.no_restart
            self.reason = self.kill_reason = event.reason
            out: list[Action] = [FreeName()] if self.no_restart else []
            if event.reachable:
                return [*out, StopWorker(self.no_restart, event.reason)]
            return [*out, self._publish(ActorState.DEAD), Cancel()]
        if isinstance(event, Lost):
            out = [Release()] if event.here else []
            reason = (self.kill_reason or event.reason) if event.here else event.reason
            self.kill_reason = ""
            if self.may_restart(event.stopping):
                self.restarts += 1
                return [*out, self._publish(ActorState.RESTARTING, reason=reason), Schedule()]
            return [*out, self._publish(ActorState.DEAD, reason=reason)]
        raise TypeError(f"unknown actor event {event!r}")

    def _publish(self, state: ActorState, address: str = "", reason: str = "") -> Publish:
        self.state = state
        self.address = address
        self.reason = reason or self.reason
        return Publish(state, address, self.reason, self.error, self.restarts)

    def validate(self) -> None:
        """Invariants: restarts within max_restarts (-1: no limit); only a live actor has an
        address; death is final (only the hosting node's own reports can move it on)."""
        limit = self.max_restarts
        assert limit < 0 or self.restarts <= limit, \
            f"restarts {self.restarts} past max_restarts {limit}"
        assert self.state is ActorState.ALIVE or not self.address, \
            f"a {self.state.value} actor has an address {self.address!r}"
        died = False
        for event, actions in self._log:
            for action in actions:
                if isinstance(action, Publish):
                    assert not died or isinstance(event, HostReported), \
                        f"{event!r} revived a dead actor: {action!r}"
                    died = action.state is ActorState.DEAD

    def story(self) -> list[str]:
        """The last events and the actions each caused, oldest first (print it when a test
        fails)."""
        return [f"{event!r} -> {actions!r}" for event, actions in self._log]
