"""The holder's side of object pulls: answer chunk requests from the local store, zero-copy.

Each transfer (a puller's address plus its transfer id) is a session that pins the object
once and keeps one read-only view of it; every `Chunk` answer carries a slice of that view
as its buffer frame, which the zmq transport sends without copying. The pin is dropped
only when the session is over (`PullDone`, the puller died, or it went idle) AND zmq has
let go of every slice, so the bytes never move or get reused while they are on the wire.
The server also remembers which nodes pulled a copy (`holders`), so that freeing the
primary copy can free the secondaries.

A puller on this machine may ask where the object lies instead (`LocalReadRequest`): the
server pins it for that transfer and answers with the store file and its identity
(`LocalReadOffer`); the pin is dropped like a chunk session's (`PullDone`, the puller died,
or it went idle), here at once since no slice of it is on the wire.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from zmesh.errors import ObjectLostError, ObjectStoreFullError
from zmesh.protocol.messages.base import Message
from zmesh.protocol.messages.transfer import (
    Chunk,
    ChunkRequest,
    LocalReadOffer,
    LocalReadRequest,
    PullDone,
    PullFailed,
)
from zmesh.store.arena import Location
from zmesh.store.local_read import describe
from zmesh.store.mapping import StoreMapper
from zmesh.store.object_store import ObjectStore

__all__ = ["ChunkServer", "MAX_CHUNK_BYTES"]

logger = logging.getLogger(__name__)

MAX_CHUNK_BYTES = 64 << 20
"""The largest chunk a puller may ask for (well under the 256 MiB message limit)."""

Send = Callable[[str, Message, Sequence[Any]], bool]


class _Session(msgspec.Struct, eq=False, dict=True):
    object_id: bytes
    view: memoryview
    loc: Location
    last_used: float


class _LocalSession(msgspec.Struct, eq=False, dict=True):
    object_id: bytes
    client: str  # the store pin's client name
    last_used: float


class ChunkServer:
    """Serves chunks of the objects in `store` to pulling peers (loop thread only).

    `send(to, msg, buffers)` sends a message; `call_soon(fn, *args)` runs `fn` on the loop
    thread from any thread (zmq may let go of a sent slice on its own thread). A session
    idle for `session_timeout` seconds is dropped, releasing its pin.
    """

    def __init__(
        self,
        store: ObjectStore,
        mapper: StoreMapper,
        send: Send,
        call_soon: Callable[..., None],
        *,
        session_timeout: float = 60.0,
    ) -> None:
        self._store = store
        self._mapper = mapper
        self._send = send
        self._call_soon = call_soon
        self.session_timeout = session_timeout
        self._sessions: dict[tuple[str, int], _Session] = {}
        self._local: dict[tuple[str, int], _LocalSession] = {}
        self._holders: dict[bytes, set[str]] = {}
        self.chunks_served = 0
        self.bytes_served = 0
        self.local_offers = 0
        self._closed = False

    # -- handlers (sender, message, buffers) -------------------------------------------

    def on_chunk_request(self, sender: str, msg: ChunkRequest, bufs: list[Any], now: float) -> None:
        key = (sender, msg.transfer_id)
        session = self._sessions.get(key)
        if session is not None and session.object_id != msg.object_id:
            self._end(key)  # the puller restarted and reused the id: the old session is stale
            session = None
        if session is None:
            session = self._open(sender, msg)
            if session is None:
                return
        if not self._store.contains(msg.object_id):
            self._end(key)
            self._refuse(sender, msg, "it was freed during the transfer", lost=True)
            return
        size = len(session.view)
        if msg.length > MAX_CHUNK_BYTES or msg.offset + msg.length > size:
            self._refuse(sender, msg, f"bad chunk request: {msg.length} bytes at offset "
                         f"{msg.offset} of a {size}-byte object (chunks are at most "
                         f"{MAX_CHUNK_BYTES} bytes)", lost=False)
            return
        session.last_used = now
        self._mapper.prefault(session.loc, msg.offset, msg.length, writable=False)
        piece = session.view[msg.offset : msg.offset + msg.length]
        reply = Chunk(transfer_id=msg.transfer_id, object_id=msg.object_id, offset=msg.offset,
                      size=size)
        if self._send(sender, reply, (piece,)):
            self.chunks_served += 1
            self.bytes_served += msg.length

    def on_local_request(self, sender: str, msg: LocalReadRequest, bufs: list[Any],
                         now: float) -> None:
        """Pin the object for the transfer and say where it lies (a puller on this machine)."""
        key = (sender, msg.transfer_id)
        local = self._local.get(key)
        if local is not None and local.object_id != msg.object_id:
            self._end_local(key)  # the puller restarted and reused the id
            local = None
        store = self._store
        object_id = msg.object_id
        if not store.contains(object_id):
            self._refuse(sender, msg, "it is not in this node's object store", lost=True)
            return
        if not store.is_sealed(object_id):
            self._refuse(sender, msg, "it is still being written here", lost=True)
            return
        client = f"local:{sender}#{msg.transfer_id}"
        try:
            loc = store.pin(object_id, client)
        except (ObjectLostError, ObjectStoreFullError) as exc:
            self._refuse(sender, msg, f"it cannot be read here: {exc}", lost=True)
            return
        try:
            where = describe(store.directory, loc)
        except OSError as exc:
            store.unpin(object_id, client)
            self._refuse(sender, msg, f"its store file cannot be named: {exc}", lost=True)
            return
        if local is not None:
            store.unpin(object_id, client)  # a repeated request: one pin per transfer
            local.last_used = now
        else:
            self._local[key] = _LocalSession(object_id, client, now)
        self._holders.setdefault(object_id, set()).add(sender)
        self.local_offers += 1
        self._send(sender, LocalReadOffer(
            transfer_id=msg.transfer_id, object_id=object_id, path=where.path,
            offset=where.offset, size=where.size, dev=where.dev, ino=where.ino,
            boot_id=where.boot_id), ())

    def on_pull_done(self, sender: str, msg: PullDone, bufs: list[Any]) -> None:
        key = (sender, msg.transfer_id)
        session = self._sessions.get(key)
        if session is not None and session.object_id == msg.object_id:
            self._end(key)
        local = self._local.get(key)
        if local is not None and local.object_id == msg.object_id:
            self._end_local(key)
        if not msg.ok:
            self._drop_holder(msg.object_id, sender)

    # -- holders -----------------------------------------------------------------------

    def holders(self, object_id: bytes) -> frozenset[str]:
        """Nodes that pulled (or are pulling) a copy of `object_id` from this one."""
        return frozenset(self._holders.get(object_id, ()))

    def take_holders(self, object_id: bytes) -> set[str]:
        """Forget and return the holders of `object_id` (its primary copy is being freed)."""
        return self._holders.pop(object_id, set())

    # -- peers and time ----------------------------------------------------------------

    def peer_died(self, address: str) -> None:
        """Drop the sessions of a dead puller and forget the copies it held."""
        for key in [k for k in self._sessions if k[0] == address]:
            self._end(key)
        for key in [k for k in self._local if k[0] == address]:
            self._end_local(key)
        for object_id in [oid for oid, nodes in self._holders.items() if address in nodes]:
            self._drop_holder(object_id, address)

    def expire(self, now: float) -> None:
        """Drop sessions idle for longer than `session_timeout` (their puller went quiet)."""
        for key, session in list(self._sessions.items()):
            if now - session.last_used > self.session_timeout:
                logger.info("transfer of %s to %s idle for %.0f s; released",
                            session.object_id.hex(), key[0], now - session.last_used)
                self._end(key)
        for key, local in list(self._local.items()):
            if now - local.last_used > self.session_timeout:
                logger.info("local read of %s by %s idle for %.0f s; released",
                            local.object_id.hex(), key[0], now - local.last_used)
                self._end_local(key)

    @property
    def sessions(self) -> int:
        """Transfers being served: chunk sessions and local reads."""
        return len(self._sessions) + len(self._local)

    def close(self) -> None:
        """Drop every session (their pins go when zmq lets go of the slices in flight)."""
        self._closed = True
        for key in list(self._sessions):
            self._end(key)
        for key in list(self._local):
            self._end_local(key)

    # -- internals ---------------------------------------------------------------------

    def _open(self, sender: str, msg: ChunkRequest) -> _Session | None:
        store = self._store
        object_id = msg.object_id
        if not store.contains(object_id):
            self._refuse(sender, msg, "it is not in this node's object store", lost=True)
            return None
        if not store.is_sealed(object_id):
            self._refuse(sender, msg, "it is still being written here", lost=True)
            return None
        client = f"pull:{sender}#{msg.transfer_id}"
        try:
            loc = store.pin(object_id, client)
        except (ObjectLostError, ObjectStoreFullError) as exc:
            self._refuse(sender, msg, f"it cannot be read here: {exc}", lost=True)
            return None
        try:
            # Prefaulted chunk by chunk as they are asked for (see `ObjectTransfer._begin`).
            view = self._mapper.readable(loc, lambda: self._call_soon(self._unpin, object_id,
                                                                      client), populate=False)
        except Exception:
            store.unpin(object_id, client)
            raise
        session = _Session(object_id, view, loc, 0.0)
        self._sessions[(sender, msg.transfer_id)] = session
        self._holders.setdefault(object_id, set()).add(sender)
        return session

    def _end(self, key: tuple[str, int]) -> None:
        # Dropping the view is all: the unpin runs once zmq has released the last slice.
        self._sessions.pop(key, None)

    def _end_local(self, key: tuple[str, int]) -> None:
        local = self._local.pop(key, None)
        if local is not None:
            self._unpin(local.object_id, local.client)

    def _unpin(self, object_id: bytes, client: str) -> None:
        try:
            self._store.unpin(object_id, client)
        except ValueError:
            pass  # the store dropped the client already (closed, or released it)

    def _drop_holder(self, object_id: bytes, address: str) -> None:
        nodes = self._holders.get(object_id)
        if nodes is not None:
            nodes.discard(address)
            if not nodes:
                del self._holders[object_id]

    def _refuse(self, sender: str, msg: ChunkRequest | LocalReadRequest, why: str, *,
                lost: bool) -> None:
        self._send(sender, PullFailed(transfer_id=msg.transfer_id, object_id=msg.object_id,
                                      reason=f"object {msg.object_id.hex()}: {why}",
                                      lost=lost), ())
