"""The two containers the membership core needs to stay O(1) per message at 1,000 members:
the dissemination queue (which updates to piggyback next) and an address set that samples.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Iterable, Iterator

__all__ = ["UpdateQueue", "AddressSet"]


class UpdateQueue:
    """Members whose record has news, each with how often it was sent; least-sent goes first.

    One entry per member: a newer update for the same member replaces the old one and its
    count restarts, so the queue never carries stale records. Bounded: past `capacity` the
    most-sent entry is dropped (push-pull anti-entropy repairs what gossip then misses).
    """

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._sent: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._sent)

    def __contains__(self, address: object) -> bool:
        return address in self._sent

    def push(self, address: str) -> None:
        """Queue `address`'s current record for dissemination, as not sent yet."""
        self._sent.pop(address, None)
        if len(self._sent) >= self._capacity:
            worst = max(self._sent, key=self._sent.__getitem__)
            del self._sent[worst]
        self._sent[address] = 0

    def discard(self, address: str) -> None:
        """Stop disseminating `address` (its record was forgotten)."""
        self._sent.pop(address, None)

    def take(self, limit: int, retransmit_limit: int) -> list[str]:
        """Up to `limit` least-sent addresses; each counts as sent once more and leaves the
        queue after `retransmit_limit` sends."""
        if not self._sent:
            return []
        if len(self._sent) <= limit:
            chosen = list(self._sent)
        else:
            chosen = heapq.nsmallest(limit, self._sent, key=self._sent.__getitem__)
        for address in chosen:
            count = self._sent[address] + 1
            if count >= retransmit_limit:
                del self._sent[address]
            else:
                self._sent[address] = count
        return chosen


class AddressSet:
    """A set of addresses with O(1) add, remove and uniform random pick (swap-remove list)."""

    def __init__(self) -> None:
        self._items: list[str] = []
        self._index: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, address: object) -> bool:
        return address in self._index

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def add(self, address: str) -> None:
        if address not in self._index:
            self._index[address] = len(self._items)
            self._items.append(address)

    def discard(self, address: str) -> None:
        i = self._index.pop(address, None)
        if i is None:
            return
        last = self._items.pop()
        if i < len(self._items):
            self._items[i] = last
            self._index[last] = i

    def sample(self, rng: random.Random, k: int, exclude: Iterable[str] = ()) -> list[str]:
        """Up to `k` distinct random addresses not in `exclude` (fewer if fewer exist)."""
        excluded = set(exclude)
        available = len(self._items) - sum(1 for a in excluded if a in self._index)
        k = min(k, available)
        if k <= 0:
            return []
        if k * 3 >= available:
            pool = [a for a in self._items if a not in excluded]
            return rng.sample(pool, k)
        picked: list[str] = []
        seen = set(excluded)
        while len(picked) < k:
            address = self._items[rng.randrange(len(self._items))]
            if address not in seen:
                seen.add(address)
                picked.append(address)
        return picked
