"""Per-process runtime state: the core client, and which refs a (de)serialization touched.

Refs pickled into a value are collected so the owner can count them as in use by the task;
refs unpickled in a borrower are collected so it can report what it still holds.
"""

from __future__ import annotations

import threading
from typing import Any

from zmesh.errors import ZmeshError

_client: Any = None
_local = threading.local()


def set_client(client: Any) -> None:
    """Install (or clear, with None) this process's core client."""
    global _client
    _client = client


_auto_init: Any = None


def set_auto_init(hook: Any) -> None:
    """Install the function that starts a runtime when the API is used before init()."""
    global _auto_init
    _auto_init = hook


def current_client() -> Any:
    """This process's core client, auto-initialising one (as Ray does) if there is none."""
    if _client is None and _auto_init is not None:
        _auto_init()
    if _client is None:
        raise ZmeshError("zmesh is not initialized: call zmesh.init() first")
    return _client


def maybe_client() -> Any:
    """This process's core client, or None."""
    return _client


class RefCollector:
    """Collects the refs serialized or deserialized on this thread while active."""

    def __init__(self) -> None:
        self.refs: list[Any] = []

    def __enter__(self) -> RefCollector:
        self._prev = getattr(_local, "collector", None)
        _local.collector = self
        return self

    def __exit__(self, *exc: object) -> None:
        _local.collector = self._prev


def note_serialized_ref(ref: Any) -> None:
    """Called from ObjectRef.__reduce__. Outside zmesh's own serialization (plain `pickle`,
    cloudpickle of a closure that captured the ref) nothing tracks where the bytes go, so,
    as Ray does with such "out-of-band" refs, the object is kept while this process lives:
    one more count of it here that is never given back (once per object)."""
    collector = getattr(_local, "collector", None)
    if collector is not None:
        collector.refs.append(ref)
        return
    client = ref._client
    if client is None or client.closed:
        return
    pinned = client.out_of_band
    if ref.id not in pinned:
        pinned.add(ref.id)
        client.objects.incref(ref.id, ref.owner)


def note_deserialized_ref(ref: Any) -> None:
    """Called when a ref is rebuilt from bytes."""
    collector = getattr(_local, "collector", None)
    if collector is not None:
        collector.refs.append(ref)
