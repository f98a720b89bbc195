"""Which chunks of which objects a node asks for next: the sans-IO half of object pulls.

A node that needs an object held elsewhere pulls it in chunks. `PullManager` decides what
to request from whom and when a pull is complete or failed; the I/O shell
(`zmesh.runtime.node.object_transfer`) allocates the store region, sends the requests and
writes the chunks. Flow control: at most `window` chunks outstanding per transfer and
`max_outstanding` over all transfers, handed out round-robin, so one large pull cannot
starve the others and received-but-unwritten chunks stay bounded. Concurrent pulls of one
object share one transfer. A source that stops answering is retried, then the next known
source is tried, then the pull fails with `ObjectLostError`.

A pull may first try a local copy (`local=True`: the source is a node on this machine whose
store files this process may read): the manager asks for `CopyLocal` instead of chunks, and
the shell answers `local_done` or `local_failed`; a failed (or silent) local copy falls back
to chunks from the same source, so the local path never loses a pull the network would make.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

import msgspec

from zmesh.errors import ObjectLostError

__all__ = [
    "Action",
    "Begin",
    "Complete",
    "CopyLocal",
    "Fail",
    "PullManager",
    "Release",
    "RequestChunk",
]


class Begin(msgspec.Struct, frozen=True):
    """Reserve `size` bytes for the object, then call `started` (or `abort` on failure)."""

    transfer_id: int
    object_id: bytes
    size: int


class RequestChunk(msgspec.Struct, frozen=True):
    """Ask `source` for `length` bytes of the object at `offset`."""

    source: str
    transfer_id: int
    object_id: bytes
    offset: int
    length: int


class Release(msgspec.Struct, frozen=True):
    """Tell `source` the transfer is over there (`ok`: complete), so it drops its pin."""

    source: str
    transfer_id: int
    object_id: bytes
    ok: bool


class CopyLocal(msgspec.Struct, frozen=True):
    """Ask `source` (a node on this machine) where the object's bytes lie, copy them from its
    file into the reserved region, then call `local_done` (or `local_failed`)."""

    source: str
    transfer_id: int
    object_id: bytes
    size: int


class Complete(msgspec.Struct, frozen=True):
    """Every byte is written: seal the copy and tell the waiters."""

    transfer_id: int
    object_id: bytes
    waiters: tuple[Any, ...]


class Fail(msgspec.Struct, frozen=True):
    """The pull cannot finish: drop the partial copy and give the waiters `error`."""

    transfer_id: int
    object_id: bytes
    waiters: tuple[Any, ...]
    error: Exception


Action = Begin | RequestChunk | CopyLocal | Release | Complete | Fail


class _Transfer(msgspec.Struct, eq=False, dict=True):
    transfer_id: int
    object_id: bytes
    size: int
    sources: list[str]
    waiters: list[Any]
    started: bool = False
    local: bool = False  # a local copy is wanted (before start) or under way (after)
    source_index: int = 0
    next_offset: int = 0  # first byte never requested yet
    redo: deque[int] = msgspec.field(default_factory=deque)  # offsets to request again (new source)
    outstanding: dict[int, int] = msgspec.field(default_factory=dict)  # offset -> length
    received: int = 0
    last_progress: float = 0.0
    stalls: int = 0  # consecutive stall timeouts on the current source
    failures: list[str] = msgspec.field(default_factory=list)

    @property
    def source(self) -> str:
        return self.sources[self.source_index]

    def has_work(self) -> bool:
        return bool(self.redo) or self.next_offset < self.size


class PullManager:
    """Pulls in flight on one node; every method takes an event and returns actions.

    `chunk_size` is the bytes per request; `window` the requests outstanding per transfer;
    `max_outstanding` over all transfers; a transfer with no chunk for `stall_timeout`
    seconds re-requests its outstanding chunks, up to `retries` times per source, before it
    moves to the next source. Times are whatever clock the caller passes as `now`.
    """

    def __init__(
        self,
        *,
        chunk_size: int = 4 << 20,
        window: int = 4,
        max_outstanding: int = 16,
        stall_timeout: float = 10.0,
        retries: int = 2,
    ) -> None:
        for name, value in (("chunk_size", chunk_size), ("window", window),
                            ("max_outstanding", max_outstanding)):
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"PullManager {name} must be a positive int, got {value!r}")
        if not stall_timeout > 0:
            raise ValueError(f"PullManager stall_timeout must be > 0 seconds, got {stall_timeout!r}")
        if not isinstance(retries, int) or retries < 0:
            raise ValueError(f"PullManager retries must be an int >= 0, got {retries!r}")
        self.chunk_size = chunk_size
        self.window = window
        self.max_outstanding = max_outstanding
        self.stall_timeout = stall_timeout
        self.retries = retries
        self._next_id = 0
        self._by_id: dict[int, _Transfer] = {}
        self._by_object: dict[bytes, _Transfer] = {}
        self._ready: deque[_Transfer] = deque()  # started transfers that may want a slot
        self._outstanding = 0
        self.transfers_started = 0
        self.pulls_merged = 0
        self.local_copies = 0  # pulls completed by a local copy
        self.local_fallbacks = 0  # local copies that failed or went silent: chunks instead

    # -- events ------------------------------------------------------------------------

    def pull(
        self, object_id: bytes, size: int, sources: Sequence[str], waiter: Any, now: float,
        *, local: bool = False,
    ) -> list[Action]:
        """Someone needs `object_id` (`size` bytes) from one of `sources`, tried in order.

        A pull of an object already in flight joins that transfer (its new sources are
        appended) and returns no actions; otherwise the answer is one `Begin`. With `local`,
        the first source is asked for a local copy before any chunk.
        """
        if not isinstance(size, int) or size < 0:
            raise ValueError(f"object size must be an int >= 0, got {size!r}")
        if not sources:
            raise ValueError(f"pull of object {object_id.hex()} names no source to pull from")
        t = self._by_object.get(object_id)
        if t is not None:
            if t.size != size:
                raise ValueError(
                    f"object {object_id.hex()} is being pulled as {t.size} bytes; a second "
                    f"pull says {size} bytes"
                )
            t.waiters.append(waiter)
            t.sources.extend(s for s in sources if s not in t.sources)
            self.pulls_merged += 1
            return []
        tid = self._next_id
        self._next_id += 1
        t = _Transfer(tid, object_id, size, list(dict.fromkeys(sources)), [waiter],
                      last_progress=now, local=bool(local) and size > 0)
        self._by_id[tid] = t
        self._by_object[object_id] = t
        self.transfers_started += 1
        return [Begin(tid, object_id, size)]

    def started(self, transfer_id: int, now: float) -> list[Action]:
        """The region for the transfer is reserved: send its first requests."""
        t = self._by_id[transfer_id]
        t.started = True
        t.last_progress = now
        if t.size == 0:
            return self._finish(t)
        if t.local:
            return [CopyLocal(t.source, t.transfer_id, t.object_id, t.size)]
        self._ready.append(t)
        return self._fill()

    def local_done(self, transfer_id: int, now: float) -> list[Action]:
        """The local copy of the transfer is written: complete it. Ignored when the
        transfer is over or no longer copying locally (it moved on meanwhile)."""
        t = self._by_id.get(transfer_id)
        if t is None or not t.started or not t.local:
            return []
        t.local = False
        t.received = t.size
        t.last_progress = now
        self.local_copies += 1
        return self._finish(t)

    def local_failed(self, transfer_id: int, why: str, now: float) -> list[Action]:
        """The local copy cannot be made (another machine, no access, a wrong identity):
        pull the object in chunks from the same source instead."""
        t = self._by_id.get(transfer_id)
        if t is None or not t.started or not t.local:
            return []
        t.local = False
        t.last_progress = now
        t.stalls = 0
        self.local_fallbacks += 1
        self._ready.append(t)
        return self._fill()

    def local_progress(self, transfer_id: int, now: float) -> None:
        """A piece of the local copy is written (a long copy is not a silent one)."""
        t = self._by_id.get(transfer_id)
        if t is not None and t.local:
            t.last_progress = now

    def copying_locally(self, transfer_id: int) -> bool:
        """Whether the transfer is waiting for its local copy."""
        t = self._by_id.get(transfer_id)
        return t is not None and t.started and t.local

    def abort(self, transfer_id: int, error: Exception) -> list[Action]:
        """The transfer cannot go on (no room in the store, the shell is closing, ...)."""
        t = self._by_id.get(transfer_id)
        return [] if t is None else self._fail(t, error)

    def on_chunk(
        self, source: str, transfer_id: int, offset: int, length: int, size: int, now: float
    ) -> tuple[bool, list[Action]]:
        """A chunk arrived. Returns (write, actions): when `write`, copy the bytes into the
        region first, then carry out the actions. Unexpected chunks (a late duplicate, a
        source given up on) are not written."""
        t = self._by_id.get(transfer_id)
        if t is None or not t.started or t.local or source != t.source:
            return False, []
        if size != t.size:
            return False, self._fail(t, ObjectLostError(
                f"object {t.object_id.hex()} at {source} is {size} bytes, but {t.size} bytes "
                "were expected; the copies differ"))
        if t.outstanding.get(offset) != length:
            return False, []
        del t.outstanding[offset]
        self._outstanding -= 1
        t.received += length
        t.last_progress = now
        t.stalls = 0
        if t.received == t.size:
            return True, self._finish(t)
        if t.has_work() and t not in self._ready:
            self._ready.append(t)
        return True, self._fill()

    def on_failed(self, source: str, transfer_id: int, reason: str, now: float) -> list[Action]:
        """`source` cannot serve the transfer (it has no copy, or refused the request)."""
        t = self._by_id.get(transfer_id)
        if t is None or source != t.source:
            return []
        return self._next_source(t, f"{source}: {reason}", now, release=True)

    def pulling_from(self, source: str) -> list[tuple[int, bytes]]:
        """(transfer id, object id) of the transfers whose current source is `source`."""
        return [(t.transfer_id, t.object_id) for t in self._by_id.values()
                if t.source == source]

    def source_died(self, source: str, now: float) -> list[Action]:
        """`source` is gone: every transfer from it moves on or fails."""
        actions: list[Action] = []
        for t in list(self._by_id.values()):
            if source in t.sources[t.source_index + 1:]:
                t.sources.remove(source)  # never try it later
            if t.source == source:
                actions += self._next_source(
                    t, f"{source} died after sending {t.received} of {t.size} bytes", now,
                    release=False)
        return actions

    def cancel(self, object_id: bytes, error: Exception) -> list[Action]:
        """Stop pulling `object_id` (it was freed); its waiters get `error`."""
        t = self._by_object.get(object_id)
        return [] if t is None else self._fail(t, error)

    def tick(self, now: float) -> list[Action]:
        """Check for stalled transfers; call every fraction of `stall_timeout`."""
        actions: list[Action] = []
        for t in list(self._by_id.values()):
            if t.started and t.local:
                if now - t.last_progress >= self.stall_timeout:
                    actions += self.local_failed(
                        t.transfer_id, f"no local copy within {self.stall_timeout:g} s", now)
                continue
            if not t.outstanding:
                # Waiting for a request slot (others hold them all) is not a stall.
                t.last_progress = now
                continue
            if now - t.last_progress < self.stall_timeout:
                continue
            if t.stalls < self.retries:
                t.stalls += 1
                t.last_progress = now
                actions += [RequestChunk(t.source, t.transfer_id, t.object_id, off, n)
                            for off, n in sorted(t.outstanding.items())]
                continue
            actions += self._next_source(
                t, f"{t.source} stopped answering for {self.stall_timeout:g} s "
                f"({self.retries} retries) after {t.received} of {t.size} bytes", now,
                release=True)
        return actions

    # -- queries -----------------------------------------------------------------------

    def pulling(self, object_id: bytes) -> bool:
        return object_id in self._by_object

    @property
    def active(self) -> int:
        """Transfers in flight."""
        return len(self._by_id)

    @property
    def outstanding(self) -> int:
        """Chunk requests sent and not yet answered, over all transfers."""
        return self._outstanding

    def outstanding_of(self, transfer_id: int) -> int:
        t = self._by_id.get(transfer_id)
        return 0 if t is None else len(t.outstanding)

    def validate(self) -> None:
        """Check the invariants (tests call it after every event)."""
        assert len(self._by_id) == len(self._by_object)
        total = 0
        for tid, t in self._by_id.items():
            assert t.transfer_id == tid and self._by_object[t.object_id] is t
            assert 0 <= t.source_index < len(t.sources)
            assert 0 <= t.received <= t.size and t.next_offset <= t.size
            assert not (t.local and (t.outstanding or t.redo or t.next_offset)), \
                "a transfer copying locally has chunk requests"
            assert len(t.outstanding) <= self.window
            total += len(t.outstanding)
        assert total == self._outstanding, (total, self._outstanding)
        assert self._outstanding <= self.max_outstanding
        for t in self._ready:
            assert t.transfer_id in self._by_id and not t.local

    # -- internals ---------------------------------------------------------------------

    def _fill(self) -> list[Action]:
        """Hand free request slots to transfers that want them, one at a time round-robin."""
        actions: list[Action] = []
        ready = self._ready
        while ready and self._outstanding < self.max_outstanding:
            t = ready.popleft()
            if not t.has_work() or t.transfer_id not in self._by_id:
                continue
            if len(t.outstanding) >= self.window:
                continue  # re-queued when one of its chunks arrives
            offset = t.redo.popleft() if t.redo else t.next_offset
            length = min(self.chunk_size, t.size - offset)
            if offset == t.next_offset:
                t.next_offset += length
            t.outstanding[offset] = length
            self._outstanding += 1
            actions.append(RequestChunk(t.source, t.transfer_id, t.object_id, offset, length))
            if t.has_work():
                ready.append(t)
        return actions

    def _next_source(self, t: _Transfer, why: str, now: float, *, release: bool) -> list[Action]:
        t.failures.append(why)
        t.local = False  # a local copy is only ever tried from the first source
        actions: list[Action] = []
        if release and t.started:
            actions.append(Release(t.source, t.transfer_id, t.object_id, False))
        if t.source_index + 1 >= len(t.sources):
            return actions + self._fail(t, self._lost(t), release=False)
        t.source_index += 1
        t.stalls = 0
        t.last_progress = now
        # Chunks asked of the old source are asked again, lowest offset first.
        t.redo = deque(sorted({*t.redo, *t.outstanding}))
        self._outstanding -= len(t.outstanding)
        t.outstanding.clear()
        if not t.started:
            return actions
        if t not in self._ready:
            self._ready.append(t)
        return actions + self._fill()

    def _lost(self, t: _Transfer) -> ObjectLostError:
        tried = "; ".join(t.failures)
        return ObjectLostError(
            f"could not pull object {t.object_id.hex()} ({t.size} bytes) from any of "
            f"{len(t.sources)} source(s): {tried}"
        )

    def _finish(self, t: _Transfer) -> list[Action]:
        self._forget(t)
        # Its request slots go to the transfers still waiting for one.
        return [Release(t.source, t.transfer_id, t.object_id, True),
                Complete(t.transfer_id, t.object_id, tuple(t.waiters)), *self._fill()]

    def _fail(self, t: _Transfer, error: Exception, *, release: bool = True) -> list[Action]:
        actions: list[Action] = []
        if release and t.started:
            actions.append(Release(t.source, t.transfer_id, t.object_id, False))
        self._forget(t)
        actions.append(Fail(t.transfer_id, t.object_id, tuple(t.waiters), error))
        return actions + self._fill()

    def _forget(self, t: _Transfer) -> None:
        del self._by_id[t.transfer_id]
        del self._by_object[t.object_id]
        self._outstanding -= len(t.outstanding)
        t.outstanding.clear()
        try:
            self._ready.remove(t)
        except ValueError:
            pass
