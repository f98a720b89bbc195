"""Ids: every process mints task ids from its own random prefix, so ids never collide."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable

_source: Callable[[int], bytes] = os.urandom


def set_id_source(source: Callable[[int], bytes] | None) -> None:
    """Draw ids from `source(n)` (a seeded simulation) or, with None, from os.urandom."""
    global _source
    _source = source or os.urandom


class IdGen:
    """Task ids are an 8-byte process prefix plus a counter; object ids add a return index."""

    def __init__(self, prefix: bytes | None = None) -> None:
        self.prefix = prefix or _source(8)
        self._counter = itertools.count(1)

    def task_id(self) -> bytes:
        return self.prefix + next(self._counter).to_bytes(8, "little")

    @staticmethod
    def object_id(task_id: bytes, index: int) -> bytes:
        return task_id + index.to_bytes(4, "little")


def actor_life_id(actor_id: bytes) -> bytes:
    """The id under which an actor's handles are reference-counted, like an object its creator
    owns: when it is released everywhere, a non-detached actor exits."""
    return actor_id + b"life"


def random_id(n: int = 16) -> bytes:
    """A fresh random id (actors, placement groups, leases)."""
    return _source(n)
