"""Primary side of subscriptions: which subscribers watch which keys of this member's shards.

These are copies: the subscriber owns its subscriptions (`control_watches`) and sends them
again in every handoff, so the registry is emptied on each membership change and refilled.
"""

from __future__ import annotations

from collections.abc import Iterator

from zmesh.protocol.messages.control import WatchState
from zmesh.store.control_watches import watch_matches

__all__ = ["WatchKey", "WatcherRegistry"]

WatchKey = tuple[str, int]
"""(subscriber, sub_id): a subscription as a primary knows it."""


class WatcherRegistry:
    """Watches held by a primary, indexed by key and prefix, plus those owed a snapshot."""

    def __init__(self) -> None:
        self._watches: dict[WatchKey, WatchState] = {}
        self._by_key: dict[str, set[WatchKey]] = {}
        self._prefixes: set[WatchKey] = set()
        self._owed: dict[WatchKey, None] = {}  # ordered set: snapshot due once ready

    def clear(self) -> None:
        """Forget every watch (the view changed; subscribers send theirs again)."""
        self._watches.clear()
        self._by_key.clear()
        self._prefixes.clear()
        self._owed.clear()

    def hold(self, subscriber: str, watch: WatchState, *, owe_snapshot: bool) -> None:
        """Hold (or replace) a subscriber's watch; `owe_snapshot` queues its snapshot."""
        wk = (subscriber, watch.sub_id)
        self.drop(wk)
        self._watches[wk] = watch
        if watch.prefix:
            self._prefixes.add(wk)
        else:
            self._by_key.setdefault(watch.target, set()).add(wk)
        if owe_snapshot:
            self._owed[wk] = None

    def drop(self, wk: WatchKey) -> None:
        """Forget one watch; unknown ones are ignored (a late or repeated unsubscribe)."""
        watch = self._watches.pop(wk, None)
        if watch is None:
            return
        self._prefixes.discard(wk)
        self._owed.pop(wk, None)
        holders = self._by_key.get(watch.target)
        if holders is not None:
            holders.discard(wk)
            if not holders:
                del self._by_key[watch.target]

    def take_owed(self) -> list[tuple[WatchKey, WatchState]]:
        """The watches still owed a snapshot, in the order they arrived; the debt is cleared."""
        owed = [(wk, self._watches[wk]) for wk in self._owed]
        self._owed.clear()
        return owed

    def watching(self, key: str) -> Iterator[WatchKey]:
        """Every watch that a change of `key` concerns."""
        yield from self._by_key.get(key, ())
        for wk in self._prefixes:
            if watch_matches(self._watches[wk], key):
                yield wk

    def __len__(self) -> int:
        return len(self._watches)
