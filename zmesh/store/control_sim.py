"""A control store cluster on SimNet, with membership driven by hand: for tests and benchmarks.

Members join, leave and crash when told; `detect` tells the survivors (as SWIM would).
Every request and subscription goes through the same sans-IO cores the runtime drives.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from zmesh.store.control_requests import Completion
from zmesh.store.control_store import ControlStore, StoreConfig
from zmesh.store.control_watches import Notification
from zmesh.testing.simnet import SimNet

__all__ = ["StoreCluster"]


class StoreCluster:
    """Control store members on one seeded SimNet; `members` is the membership they are told."""

    def __init__(
        self,
        names: Iterable[str],
        *,
        seed: int = 0,
        config: StoreConfig | None = None,
        drop_rate: float = 0.0,
    ) -> None:
        self.net = SimNet(seed, drop_rate=drop_rate)
        self.config = config
        self.stores: dict[str, ControlStore] = {}
        self.members: set[str] = set()
        self.results: dict[str, dict[int, Completion]] = {}
        self.notifications: dict[str, list[Notification]] = {}
        for name in names:
            self._start(name)
        self._announce()

    @property
    def now(self) -> float:
        return self.net.now

    def _start(self, name: str) -> ControlStore:
        if name in self.stores:
            raise ValueError(f"member {name!r} already exists; a rejoining member needs a new name")
        store = ControlStore(name, config=self.config)
        self.stores[name] = store
        self.results[name] = {}
        self.notifications[name] = []
        self.net.add(name, store)
        self.members.add(name)
        return store

    def _announce(self) -> None:
        # Every running store hears of it, members or not (a member that left is a client now).
        for name in sorted(self.stores):
            if name not in self.net.crashed:
                self.stores[name].set_members(self.now, self.members)
                self._wake(name)

    def _wake(self, name: str) -> None:
        # SimNet re-reads a node's next_deadline only after events it delivers; re-adding a
        # live node is its public way to re-arm the timer after a call from outside.
        if name not in self.net.crashed:
            self.net.add(name, self.stores[name])

    # -- membership ------------------------------------------------------------------------
    def join(self, name: str) -> ControlStore:
        """Start a fresh member and tell everyone."""
        store = self._start(name)
        self._announce()
        return store

    def leave(self, name: str) -> None:
        """`name` leaves gracefully: it and the others learn the new membership."""
        self.members.discard(name)
        self._announce()

    def crash(self, name: str, *, detect: bool = True) -> None:
        """`name` stops dead; with `detect`, the survivors learn it at once."""
        self.net.crash(name)
        if detect:
            self.detect(name)

    def detect(self, *names: str) -> None:
        """The survivors learn that `names` are gone."""
        self.members.difference_update(names)
        self._announce()

    def live(self) -> list[str]:
        """Members that are running and in the membership."""
        return sorted(n for n in self.members if n not in self.net.crashed)

    # -- running ---------------------------------------------------------------------------
    def call(self, name: str, fn: Callable[[ControlStore, float], int]) -> int:
        """Run a client call on member `name` at the current time; returns its id."""
        rid = fn(self.stores[name], self.now)
        self._wake(name)
        return rid

    def _collect(self) -> None:
        for name, store in self.stores.items():
            for done in store.drain_completions():
                self.results[name][done.rid] = done
            self.notifications[name] += store.drain_notifications()

    def run_for(self, seconds: float) -> None:
        self.net.run_for(seconds)
        self._collect()

    def wait(self, name: str, rid: int, *, timeout: float = 30.0) -> Completion:
        """Run until request `rid` of member `name` completes; TimeoutError past `timeout`."""
        end = self.now + timeout
        store, results = self.stores[name], self.results[name]
        while rid not in results:
            for done in store.drain_completions():
                results[done.rid] = done
            if rid in results:
                break
            if self.now >= end or not self.net.step():
                raise TimeoutError(f"request {rid} of {name} did not complete by t={self.now:.3f}")
        self._collect()
        return results[rid]

    def settle(self, *, timeout: float = 30.0, step: float = 0.01) -> None:
        """Run until every live member is settled (ready, every handoff confirmed)."""
        end = self.now + timeout
        while not all(self.stores[n].settled for n in self.live()):
            if self.now >= end:
                stuck = [n for n in self.live() if not self.stores[n].settled]
                raise TimeoutError(f"members {stuck} not settled by t={self.now:.3f}")
            self.run_for(step)
