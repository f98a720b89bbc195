"""Moving objects between nodes: pull in chunks into the local store, serve chunks to others.

`ObjectTransfer` is the I/O shell a node runs on its event loop: `PullManager`
(zmesh.core.pull_manager) decides which chunks to ask for, this module allocates the copy
in the local `ObjectStore`, writes each chunk straight from the received zmq frame into the
mapped region (the only copy on the receiving side), seals it as a secondary copy and
calls the waiters; `ChunkServer` answers other nodes' requests. Freeing an object here
forwards the free to every node that pulled a copy from here.

With `local_root` set, a pull from a node that may run on this machine (`local_hint`) first
asks it where the object lies in its store file and copies the bytes from that file (after
`zmesh.store.local_read.open_verified` checks it), in steps between other messages; any
refusal falls back to chunks from the same source, counted in `local_fallbacks`.

Every method runs on the loop thread (post from elsewhere with `loop.call_soon`). Frees must
go through `free`, never straight to the store: a region being filled by a pull must not
be released under it.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import msgspec

from zmesh.core.pull_manager import (
    Action,
    Begin,
    Complete,
    CopyLocal,
    Fail,
    PullManager,
    Release,
    RequestChunk,
)
from zmesh.errors import ObjectLostError, ObjectStoreFullError
from zmesh.protocol.messages.runtime import FreeObjects
from zmesh.protocol.messages.transfer import (
    Chunk,
    ChunkRequest,
    LocalReadOffer,
    LocalReadRequest,
    PullDone,
    PullFailed,
)
from zmesh.runtime.loop import EventLoop
from zmesh.runtime.node.chunk_server import ChunkServer
from zmesh.store.arena import Location
from zmesh.store.local_read import (
    COPY_PIECE,
    LocalFile,
    LocalReadRefused,
    copy_piece,
    open_verified,
)
from zmesh.store.mapping import StoreMapper
from zmesh.store.object_store import ObjectStore

__all__ = ["DoneCallback", "ObjectTransfer", "TransferStats", "TRANSFER_OWNER"]

logger = logging.getLogger(__name__)

DoneCallback = Callable[[bytes, "BaseException | None"], None]
"""`on_done(object_id, error)`: error is None once the local copy is sealed."""

TRANSFER_OWNER = "zmesh-transfer"
"""The store owner of regions being filled by pulls (`release_client` drops them all)."""
ABANDONED_MAX = 4096
"""Pulls remembered per source taken for dead, to end there if it is back (`peer_back`)."""


class TransferStats(msgspec.Struct, frozen=True):
    """Counters of one node's transfers, both directions."""

    active_pulls: int
    outstanding_chunks: int
    transfers_started: int
    pulls_merged: int
    chunks_received: int
    bytes_received: int
    serving_sessions: int
    chunks_served: int
    bytes_served: int
    local_copies: int = 0  # pulls made by copying a store file on this machine
    local_bytes: int = 0
    local_fallbacks: int = 0  # local copies refused or failed: pulled in chunks instead
    local_offers: int = 0  # local reads this node answered for others


class ObjectTransfer:
    """Pulls objects from other nodes into `store` and serves its objects to them.

    Tuning: `chunk_size` bytes per request, `window` requests in flight per pull,
    `max_outstanding` over all pulls; a source silent for `stall_timeout` seconds is asked
    again `retries` times, then the next source is tried, then the pull fails with
    ObjectLostError. `mapper` should be the store's own (default: a new one on its
    directory). `local_root` (the store root of this node's directory) turns on local
    copies from sources that `local_hint(address)` says may be on this machine (default:
    all). Call `register(loop)` before use and `close()` before the store closes.
    """

    def __init__(
        self,
        store: ObjectStore,
        *,
        mapper: StoreMapper | None = None,
        chunk_size: int = 4 << 20,
        window: int = 4,
        max_outstanding: int = 16,
        stall_timeout: float = 10.0,
        retries: int = 2,
        session_timeout: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        local_root: str | None = None,
        local_hint: Callable[[str], bool] | None = None,
    ) -> None:
        self.store = store
        self._own_mapper = mapper is None
        self._mapper = mapper if mapper is not None else StoreMapper(store.directory)
        self.manager = PullManager(chunk_size=chunk_size, window=window,
                                   max_outstanding=max_outstanding, stall_timeout=stall_timeout,
                                   retries=retries)
        self._clock = clock
        self._loop: EventLoop | None = None
        self.server = ChunkServer(store, self._mapper, self._send, self._call_soon,
                                  session_timeout=session_timeout)
        self._views: dict[int, memoryview] = {}  # transfer id -> the region being filled
        self._locs: dict[int, Location] = {}  # transfer id -> where that region lies
        self._objects: dict[int, bytes] = {}  # transfer id -> object id
        self.chunks_received = 0
        self.bytes_received = 0
        self.local_root = local_root
        self._local_hint = local_hint
        self._local_from: dict[int, str] = {}  # transfer id -> source asked for a local read
        self._local_fds: dict[int, int] = {}  # transfer id -> the holder's file, being copied
        # transfer id -> (holder, object id, when its pin was last renewed), while copying
        self._local_pins: dict[int, tuple[str, bytes, float]] = {}
        self.local_bytes = 0
        self.last_local_refusal = ""  # why the latest local copy fell back (for tests, logs)
        self._closed = False
        # pulls left when their source was taken for dead: source -> (transfer, object)
        self._abandoned: dict[str, list[tuple[int, bytes]]] = {}

    # -- wiring ------------------------------------------------------------------------

    def register(self, loop: EventLoop, *, handle_free: bool = True) -> None:
        """Handle the transfer messages on `loop` (and `FreeObjects`, unless the node routes
        frees itself, in which case it must call `free`), and start the stall timer."""
        self._loop = loop
        loop.on(ChunkRequest, self.on_chunk_request)
        loop.on(Chunk, self.on_chunk)
        loop.on(PullFailed, self.on_pull_failed)
        loop.on(PullDone, self.server.on_pull_done)
        loop.on(LocalReadRequest, self.on_local_request)
        loop.on(LocalReadOffer, self.on_local_offer)
        if handle_free:
            loop.on(FreeObjects, self.on_free_objects)
        loop.call_later(self._tick_period(), self._tick)

    # -- pulling -----------------------------------------------------------------------

    def pull(
        self, object_id: bytes, source: str | Sequence[str], size: int, on_done: DoneCallback
    ) -> None:
        """Copy `object_id` (`size` bytes) from the node at `source` (or the first of several
        that answers) into the local store; `on_done(object_id, error)` runs on the loop
        thread when the copy is sealed (error None) or cannot be made. A pull of an object
        already being pulled joins that transfer; one already here completes at once."""
        if self._closed:
            on_done(object_id, ObjectLostError(
                f"cannot pull object {object_id.hex()}: the transfer service is closed"))
            return
        sources = [source] if isinstance(source, str) else list(source)
        if not self.manager.pulling(object_id) and self.store.contains(object_id) \
                and self.store.is_sealed(object_id):
            _call(on_done, object_id, None)
            return
        local = self.local_root is not None and (
            self._local_hint is None or self._local_hint(sources[0]))
        self._run(self.manager.pull(object_id, size, sources, on_done, self._clock(),
                                    local=local))

    def on_chunk(self, sender: str, msg: Chunk, bufs: list[Any]) -> None:
        if len(bufs) != 1:
            logger.warning("dropped a chunk of object %s from %s: %d buffer frames, expected 1",
                           msg.object_id.hex(), sender, len(bufs))
            return
        if self._objects.get(msg.transfer_id) != msg.object_id:
            return  # a late duplicate of a chunk asked again, or of a transfer now over
        data = bufs[0]
        n = data.nbytes if type(data) is memoryview else memoryview(data).nbytes
        if msg.offset >= 0 and msg.offset + n <= len(self._views[msg.transfer_id]):
            try:  # (before the manager counts the chunk in: what it asks next stays valid)
                self.store.reserve(msg.object_id, msg.offset, n)
            except (ObjectStoreFullError, ObjectLostError) as exc:
                self._run(self.manager.abort(msg.transfer_id, exc))
                return
        write, actions = self.manager.on_chunk(sender, msg.transfer_id, msg.offset, n, msg.size,
                                               self._clock())
        if write:
            self._mapper.prefault(self._locs[msg.transfer_id], msg.offset, n, writable=True)
            self._views[msg.transfer_id][msg.offset : msg.offset + n] = data
            self.chunks_received += 1
            self.bytes_received += n
        self._run(actions)

    def on_pull_failed(self, sender: str, msg: PullFailed, bufs: list[Any]) -> None:
        self._run(self.manager.on_failed(sender, msg.transfer_id, msg.reason, self._clock()))

    def on_local_offer(self, sender: str, msg: LocalReadOffer, bufs: list[Any]) -> None:
        tid = msg.transfer_id
        if self._local_from.get(tid) != sender or self._objects.get(tid) != msg.object_id \
                or not self.manager.copying_locally(tid):
            return  # late, or not asked of this sender
        del self._local_from[tid]
        view = self._views[tid]
        if msg.size != len(view):
            self._local_failed(tid, f"{sender} has {msg.size} bytes, {len(view)} expected")
            return
        assert self.local_root is not None
        offer = LocalFile(msg.path, msg.offset, msg.size, msg.dev, msg.ino, msg.boot_id)
        try:
            fd = open_verified(self.local_root, offer)
        except (LocalReadRefused, OSError) as exc:
            self._local_failed(tid, str(exc))
            return
        self._local_fds[tid] = fd  # (closed by the last step, or when the transfer ends)
        self._local_pins[tid] = (sender, msg.object_id, self._clock())
        self._copy_step(tid, fd, msg.offset, 0)

    def _copy_step(self, tid: int, fd: int, src_offset: int, done: int) -> None:
        """Copy the next piece of the local read; the loop serves a message between pieces."""
        view = self._views.get(tid)
        if view is None or not self.manager.copying_locally(tid) \
                or self._local_fds.get(tid) != fd:
            self._close_local(tid)  # the pull ended meanwhile (freed, source died, closing)
            return
        end = min(done + COPY_PIECE, len(view))
        try:
            self.store.reserve(self._objects[tid], done, end - done)
        except (ObjectStoreFullError, ObjectLostError) as exc:
            # (through _close_local: the abort's end of the transfer closes it too, and a
            # second os.close raised EBADF there, before the pull's waiters were told)
            self._close_local(tid)
            self._run(self.manager.abort(tid, exc))
            return
        try:
            self._mapper.prefault(self._locs[tid], done, end - done, writable=True)
            copy_piece(fd, src_offset + done, view[done:end])
        except (LocalReadRefused, OSError) as exc:
            self._close_local(tid)
            self._local_failed(tid, f"reading the file failed: {exc}")
            return
        if end < len(view):
            assert self._loop is not None
            now = self._clock()
            self.manager.local_progress(tid, now)
            self._renew_pin(tid, now)
            self._loop.call_later(0.0, lambda: self._copy_step(tid, fd, src_offset, end))
            return
        self._close_local(tid)
        self.local_bytes += end
        self._run(self.manager.local_done(tid, self._clock()))

    def _renew_pin(self, tid: int, now: float) -> None:
        """Ask the holder again, now and then, during a long copy: its pin for a local read
        goes after `session_timeout` idle seconds, and nothing else reaches it while we copy
        (the copy of a huge object, or on a slow or busy machine, took longer and read a file
        region the holder no longer kept). A repeated LocalReadRequest renews the pin; the
        offer it brings again is ignored here (no longer asked for). The period is a quarter
        of our own session timeout (nodes share the setting)."""
        pin = self._local_pins.get(tid)
        if pin is None or now - pin[2] < self.server.session_timeout / 4:
            return
        source, object_id, _ = pin
        self._local_pins[tid] = (source, object_id, now)
        self._send(source, LocalReadRequest(transfer_id=tid, object_id=object_id), ())

    def _close_local(self, tid: int) -> None:
        """Close the holder's file of a local copy (once; a step left pending when the loop
        stopped never runs, so the end of the transfer closes it too)."""
        self._local_pins.pop(tid, None)
        fd = self._local_fds.pop(tid, None)
        if fd is not None:
            os.close(fd)

    def _local_failed(self, tid: int, why: str) -> None:
        self.last_local_refusal = why
        logger.debug("local copy for transfer %d refused, pulling in chunks: %s", tid, why)
        self._run(self.manager.local_failed(tid, why, self._clock()))

    # -- serving -----------------------------------------------------------------------

    def on_local_request(self, sender: str, msg: LocalReadRequest, bufs: list[Any]) -> None:
        self.server.on_local_request(sender, msg, bufs, self._clock())

    def on_chunk_request(self, sender: str, msg: ChunkRequest, bufs: list[Any]) -> None:
        self.server.on_chunk_request(sender, msg, bufs, self._clock())

    def holders(self, object_id: bytes) -> frozenset[str]:
        """Nodes that pulled a copy of `object_id` from this one."""
        return self.server.holders(object_id)

    # -- freeing and failures ----------------------------------------------------------

    def free(self, object_ids: Iterable[bytes]) -> None:
        """The objects' last references are gone: stop pulling them, free the local copies
        and forward the free to every node that pulled a copy from here."""
        forward: dict[str, list[bytes]] = {}
        for object_id in object_ids:
            self._run(self.manager.cancel(object_id, ObjectLostError(
                f"object {object_id.hex()} was freed while being pulled")))
            try:
                self.store.free(object_id)
            except ValueError as exc:  # a closed store
                logger.debug("free of %s: %s", object_id.hex(), exc)
            for node in self.server.take_holders(object_id):
                forward.setdefault(node, []).append(object_id)
        for node, ids in forward.items():
            self._send(node, FreeObjects(object_ids=ids), ())

    def on_free_objects(self, sender: str, msg: FreeObjects, bufs: list[Any]) -> None:
        self.free(msg.object_ids)

    def peer_died(self, address: str) -> None:
        """A node is gone (membership says so): pulls from it move on or fail at once, and
        its sessions and copies are forgotten. The pulls left are remembered: it may be
        alive after all (paused, cut off), holding their pins (`peer_back`)."""
        left = self._abandoned.setdefault(address, [])
        left += self.manager.pulling_from(address)[:ABANDONED_MAX - len(left)]
        self._run(self.manager.source_died(address, self._clock()))
        self.server.peer_died(address)

    def peer_back(self, address: str) -> None:
        """A node taken for dead answers again: the pulls this node left when it took it
        for dead are over, so it may drop their sessions and pins now. Before, they stayed
        pinned there until its idle timeout (60 s), as a transfer whose puller went quiet
        (a driver's put on a node paused past its death, read on another node)."""
        for transfer_id, object_id in self._abandoned.pop(address, []):
            self._send(address, PullDone(transfer_id=transfer_id, object_id=object_id,
                                         ok=False), ())

    def stats(self) -> TransferStats:
        m = self.manager
        return TransferStats(
            active_pulls=m.active, outstanding_chunks=m.outstanding,
            transfers_started=m.transfers_started, pulls_merged=m.pulls_merged,
            chunks_received=self.chunks_received, bytes_received=self.bytes_received,
            serving_sessions=self.server.sessions, chunks_served=self.server.chunks_served,
            bytes_served=self.server.bytes_served, local_copies=m.local_copies,
            local_bytes=self.local_bytes, local_fallbacks=m.local_fallbacks,
            local_offers=self.server.local_offers)

    def close(self) -> None:
        """Fail every pull in flight and drop every session; idempotent."""
        if self._closed:
            return
        self._closed = True
        for tid in list(self._objects):
            self._run(self.manager.abort(tid, ObjectLostError(
                f"pull of object {self._objects[tid].hex()} stopped: the node is shutting down")))
        self.server.close()
        if self._own_mapper:
            self._mapper.close()

    # -- carrying out the manager's actions ---------------------------------------------

    def _run(self, actions: list[Action]) -> None:
        for action in actions:
            if type(action) is RequestChunk:
                self._request(action)
            elif type(action) is Begin:
                self._begin(action)
            elif type(action) is CopyLocal:
                self._ask_local(action)
            elif type(action) is Release:
                self._send(action.source, PullDone(transfer_id=action.transfer_id,
                                                   object_id=action.object_id, ok=action.ok), ())
            elif type(action) is Complete:
                self._complete(action)
            elif type(action) is Fail:
                self._fail(action)

    def _request(self, a: RequestChunk) -> None:
        msg = ChunkRequest(transfer_id=a.transfer_id, object_id=a.object_id, offset=a.offset,
                           length=a.length)
        if not self._send(a.source, msg, ()):
            self._run(self.manager.on_failed(a.source, a.transfer_id,
                                             "cannot send to it (unreachable address, or its "
                                             "send queue is full)", self._clock()))

    def _ask_local(self, a: CopyLocal) -> None:
        self._local_from[a.transfer_id] = a.source
        if not self._send(a.source, LocalReadRequest(transfer_id=a.transfer_id,
                                                     object_id=a.object_id), ()):
            self._local_from.pop(a.transfer_id, None)
            self._local_failed(a.transfer_id, f"cannot send to {a.source}")

    def _begin(self, a: Begin) -> None:
        try:
            # (its pages are reserved chunk by chunk too, as they arrive)
            loc = self.store.allocate(a.object_id, a.size, owner=TRANSFER_OWNER, reserve=False)
        except Exception as exc:  # no room, or a copy being written here by someone else
            self._run(self.manager.abort(a.transfer_id, exc))
            return
        try:
            # Pages are prefaulted chunk by chunk as the bytes arrive: all at once here (and
            # reserved at once in `allocate`), a 1 GiB object held the loop for seconds on a
            # busy machine, long enough for the other members to declare this node dead.
            self._views[a.transfer_id] = self._mapper.writable(loc, populate=False)
        except Exception as exc:
            self.store.free(a.object_id)
            self._run(self.manager.abort(a.transfer_id, exc))
            return
        self._objects[a.transfer_id] = a.object_id
        self._locs[a.transfer_id] = loc
        self._run(self.manager.started(a.transfer_id, self._clock()))

    def _complete(self, a: Complete) -> None:
        self._drop_view(a.transfer_id)
        error: BaseException | None = None
        try:
            self.store.seal(a.object_id)
            self.store.mark_secondary(a.object_id)
        except Exception as exc:  # freed under us despite `free` (a node bug): say so
            error = ObjectLostError(f"pulled object {a.object_id.hex()} vanished before it "
                                    f"was sealed: {exc}")
        for waiter in a.waiters:
            _call(waiter, a.object_id, error)

    def _fail(self, a: Fail) -> None:
        if self._drop_view(a.transfer_id) and self.store.contains(a.object_id) \
                and not self.store.is_sealed(a.object_id):
            self.store.free(a.object_id)
        for waiter in a.waiters:
            _call(waiter, a.object_id, a.error)

    def _drop_view(self, transfer_id: int) -> bool:
        self._objects.pop(transfer_id, None)
        self._local_from.pop(transfer_id, None)
        self._locs.pop(transfer_id, None)
        self._close_local(transfer_id)
        view = self._views.pop(transfer_id, None)
        if view is None:
            return False
        view.release()
        return True

    # -- plumbing ----------------------------------------------------------------------

    def _send(self, to: str, msg: Any, buffers: Sequence[Any]) -> bool:
        if self._loop is None:
            raise RuntimeError("ObjectTransfer.register(loop) must run before any transfer")
        return self._loop.send(to, msg, buffers)

    def _call_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        if self._loop is not None:
            self._loop.call_soon(fn, *args)

    def _tick_period(self) -> float:
        return min(self.manager.stall_timeout / 4, 1.0)

    def _tick(self) -> None:
        if self._closed or self._loop is None:
            return
        now = self._clock()
        self._run(self.manager.tick(now))
        self.server.expire(now)
        self._loop.call_later(self._tick_period(), self._tick)


def _call(waiter: DoneCallback, object_id: bytes, error: BaseException | None) -> None:
    try:
        waiter(object_id, error)
    except Exception:
        logger.exception("pull waiter for object %s failed", object_id.hex())
