"""The ZeroMQ transport (tcp, ipc, inproc): one ROUTER inbound, one DEALER per peer outbound.

Each outbound DEALER names its sender (this endpoint's bound address) in the ZMTP metadata of
its connection, so the receiving ROUTER learns who sent a message once per connection, with no
extra bytes per message on the wire (`zmq_peers`). Frames of
64 KiB and more go zero-copy in both directions. All endpoints of a process share one zmq
Context (inproc needs that), reference-counted so that closing the last endpoint terminates
it and its I/O threads.

Closed by default: every tcp connection is CURVE-encrypted, and a tcp ROUTER admits only
clients that know its mesh's server key and present a key pair of their own vouched for by
the mesh (`zmesh.security.identity`); a sender's name is its address, and a tcp sender's
key must be the key of the process that receives at that address, which is asked before
anything of the sender is delivered (`zmq_proof`), so no member can speak for another. ipc
sockets live in directories
only their user can open; inproc never leaves the process. Outbound DEALERs are bounded (least
recently used ones are closed beyond `max_peers`, idle ones by `close_idle`), so the fds a
process holds do not grow with the number of peers it has ever talked to.
"""

from __future__ import annotations

import errno
import itertools
import logging
import math
import os
import stat
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import zmq

from zmesh.errors import TransportError
from zmesh.security.keys import ClusterCredentials, process_credentials

from . import zmq_batch, zmq_proof
from .base import Buffer, Endpoint, frame_nbytes
from .zmq_binding import Binding
from .zmq_coalesce import FRESH, Coalescing
from .zmq_context import ipc_socket_in_use, prepare_dealer, shared_context
from .zmq_peers import PeerTable
from .zmq_thread_sender import ZERO_COPY_THRESHOLD, ZmqThreadSender

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "ZERO_COPY_THRESHOLD",
    "ZmqEndpoint",
    "ipc_socket_in_use",
    "open_zmq_endpoint",
]

DEFAULT_MAX_FRAME_SIZE = 256 * 1024 * 1024
DEFAULT_MAX_PEERS = 256
"""Outbound connections an endpoint keeps open at most (the least recently used go first)."""
_SCHEMES = ("tcp://", "ipc://", "inproc://")
_MAX_ROUTING_ID = 255  # libzmq's limit on a routing id
# A routing id no peer has: ROUTER-made ids start with a zero byte, inproc peers' ids are
# their addresses (which contain "://").
_WAKE_ID = b"zmesh-wake"
_NOBLOCK = zmq.NOBLOCK
_SNDMORE = zmq.NOBLOCK | zmq.SNDMORE
_RCVTIMEO = zmq.RCVTIMEO
# The backend methods skip pyzmq's Python-level wrappers (routing_id/group handling that
# zmesh never uses); on the hot path that halves the cost of each call.
_send: Callable[..., Any] = zmq.backend.Socket.send
_recv: Callable[..., Any] = zmq.backend.Socket.recv
_setsockopt: Callable[..., Any] = zmq.backend.Socket.set
_getsockopt: Callable[..., Any] = zmq.backend.Socket.get
# plain ints: pyzmq's constants are enums, and an IntFlag '&' costs more than it saves
_EVENTS = int(zmq.EVENTS)
_POLLIN = int(zmq.POLLIN)


_wake_ids = itertools.count()
logger = logging.getLogger("zmesh.transports.zmq")


def _ipc_peer_gone(address: str) -> bool:
    """True for an ipc address on the filesystem whose socket file no longer exists."""
    return address.startswith("ipc:///") and not os.path.exists(address[len("ipc://"):])


class ZmqEndpoint(Binding, Coalescing, Endpoint):
    """A ROUTER bound at `address` plus a DEALER per peer; see `Endpoint` for the contract.

    Options: `max_frame_size` caps every frame sent and received (an oversized inbound frame
    makes libzmq drop that connection); `sndhwm`/`rcvhwm` bound each per-peer queue in
    messages; `linger` is how long (seconds) close waits to flush queued messages; `advertise`
    overrides the address peers see (for wildcard binds); `max_peers` bounds the outbound
    connections kept open. tcp is CURVE-encrypted and ZAP-admitted with `credentials` (default:
    this process's, see `zmesh.security.keys`); `insecure=True` turns that off, for meshes
    whose every member does the same. `proof_timeout` (default $ZMESH_PROOF_TIMEOUT, else 20)
    is how long messages of a new tcp sender wait for its address to answer for its key.
    `coalesce=True` holds small messages that follow another to the same tcp/ipc peer until
    this endpoint's next `recv` (or `flush`, or a bound), and sends them as one frame
    (`zmq_batch`): the owner thread must keep receiving.
    """

    def __init__(
        self,
        address: str,
        *,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        sndhwm: int = 10_000,
        rcvhwm: int = 10_000,
        linger: float = 0.1,
        advertise: str | None = None,
        credentials: ClusterCredentials | None = None,
        insecure: bool = False,
        max_peers: int = DEFAULT_MAX_PEERS,
        proof_timeout: float | None = None,
        coalesce: bool = False,
    ) -> None:
        if not address.startswith(_SCHEMES):
            raise TransportError(
                f"zmq transport cannot bind {address!r}: use tcp://, ipc:// or inproc://"
            )
        if max_frame_size <= 0:
            raise TransportError(f"max_frame_size must be positive, got {max_frame_size}")
        self.max_frame_size = max_frame_size
        self._sndhwm = sndhwm
        self._linger_ms = max(0, int(linger * 1000))
        if max_peers < 1:
            raise TransportError(f"max_peers must be at least 1, got {max_peers}")
        if insecure and credentials is not None:
            raise TransportError("pass credentials or insecure=True, not both")
        self.credentials: ClusterCredentials | None = (
            None if insecure else credentials if credentials is not None
            else process_credentials())
        self._max_peers = max_peers
        self._closed = False
        self._screen_inbound = address.startswith("inproc://")
        self.dropped_oversized = 0
        """Inbound messages refused for a frame over max_frame_size (inproc only; over tcp
        and ipc libzmq drops the connection instead, unseen by Python)."""
        self._peers: OrderedDict[str, zmq.Socket[bytes]] = OrderedDict()
        self._used: dict[str, float] = {}  # peer -> when it was last switched to
        self._last_to = ""
        # weak: a thread's sender (held in its thread-local) closes when the thread ends
        self._thread_senders: weakref.WeakSet[ZmqThreadSender] = weakref.WeakSet()
        self._ipc_path: str | None = None
        self._extra_ipc_paths: list[str] = []
        self._also: list[str] = []  # addresses bound by bind_also
        self._proving = False  # proofs hold or have messages ready: recv takes their way
        self._wakes = 0
        self._init_coalescing(coalesce)
        # Reentrant: a finalizer run by the garbage collector inside wake() may wake again.
        self._wake_lock = threading.RLock()
        self._context = shared_context.acquire()
        try:
            self._router = self._bind_router(address, max_frame_size, rcvhwm)
            self.peers = PeerTable(self._router, self.credentials,
                                   own_addresses=zmq_proof.own_addresses,
                                   proof_timeout=zmq_proof.proof_timeout(proof_timeout))
            self._proofs = self.peers.proofs
            self._connections = self.peers.connections
            self.address = advertise if advertise is not None else self._bound_address(address)
            self.peers.address = self.address
            self._routing_id = self.address.encode()
            if len(self._routing_id) > _MAX_ROUTING_ID:
                raise TransportError(
                    f"address {self.address!r} is {len(self._routing_id)} bytes; zmq routing ids "
                    f"are limited to {_MAX_ROUTING_ID} (use a shorter ipc path)"
                )
            # wake() reaches recv through the ROUTER itself, over inproc: recv then blocks in
            # one plain zmq recv, with no poll and no second socket to watch.
            wake_address = f"inproc://zmesh-wake-{os.getpid()}-{next(_wake_ids)}"
            self._router.bind(wake_address)
            self._waker: zmq.Socket[bytes] | None = self._context.socket(zmq.DEALER)
            self._waker.linger = 0
            self._waker.setsockopt(zmq.ROUTING_ID, _WAKE_ID)
            self._waker.connect(wake_address)
        except BaseException:
            self._release_all()
            raise
        self._wake_pending = False
        self._rcvtimeo = -1
        self._track_open()

    # -- hot path -------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    def send(self, to: str, frames: Sequence[Buffer]) -> None:
        dealer = self._peers.get(to)
        if dealer is None:
            dealer = self._connect(to)
        elif to is not self._last_to and to != self._last_to:  # `_touch`, inline
            self._last_to = to
            self._peers.move_to_end(to)
            self._used[to] = time.monotonic()
        cap = self.max_frame_size
        try:
            if len(frames) == 1:  # the common case, kept free of per-message allocations
                frame = frames[0]
                size = len(frame) if type(frame) is bytes else frame_nbytes(frame)
                if size > cap:
                    raise self._too_large(to, 0, size)
                if to in self._batchable:
                    if 0 < size < zmq_batch.SMALL:
                        batch = self._turn.get(to, FRESH)
                        if batch is not FRESH:  # not the first since the last flush: hold
                            if batch is None:
                                batch = self._turn[to] = zmq_batch.Batch()
                            elif batch.wire + size + 4 > min(cap, zmq_batch.MAX_BATCH_BYTES):
                                if not self._flush_peer(to, batch):
                                    raise zmq.Again()  # full queue: not accepted, as unbuffered
                                batch = self._turn[to] = zmq_batch.Batch()
                            batch.add1(frame, size)
                            if batch.messages >= zmq_batch.MAX_BATCH:
                                self._flush_peer(to, batch)  # (held back if it cannot go)
                            return
                        self._turn[to] = None  # the first goes at once: a lone one never waits
                    elif (held := self._turn.get(to)) and not self._flush_peer(to, held):
                        raise zmq.Again()  # order: what it holds goes first, or nothing
                if size:
                    _send(dealer, frame, _NOBLOCK, size < ZERO_COPY_THRESHOLD)
                    return
            sizes = [len(f) if type(f) is bytes else frame_nbytes(f) for f in frames]
            if not sizes:
                raise TransportError(f"message to {to!r} has no frames; send at least one")
            for index, size in enumerate(sizes):
                if size > cap:
                    raise self._too_large(to, index, size)
            if not sizes[0]:  # an empty first frame marks an envelope: escape it
                frames, sizes = zmq_batch.escape(frames), [0, 0, *sizes]
            if to in self._batchable and self._hold(to, frames, sizes):
                return
            self._send_parts(dealer, frames, sizes)
        except zmq.Again:
            # libzmq takes a multipart message whole or not at all, so nothing went out.
            raise TransportError(
                f"send queue to {to!r} is full ({self._sndhwm} messages); the peer is slow or gone"
            ) from None
        except zmq.ZMQError as exc:
            raise TransportError(f"cannot send to {to!r}: {exc}") from exc

    def _too_large(self, to: str, index: int, size: int) -> TransportError:
        return TransportError(
            f"frame {index} to {to!r} is {size} bytes, over the cap of {self.max_frame_size} "
            "bytes (max_frame_size)"
        )

    def recv(self, timeout: float | None = None) -> tuple[str, list[Buffer]] | None:
        if self._turn:  # `_end_turn`, inline: this runs at every receive of the loop
            if self._inbox and self._turn_recvs < zmq_batch.TURN_RECVS:
                self._turn_recvs += 1
            else:
                self.flush()
            if self._held_back and timeout != 0 and not self._inbox:
                timeout = self._await_room(timeout)
        if self._inbox:
            return self._inbox.popleft()
        if self._proving:
            return zmq_proof.receive(self, timeout)
        router = self._router
        timeout_ms = -1 if timeout is None else max(0, math.ceil(timeout * 1000))
        try:
            poll = timeout_ms == 0
            if not poll and timeout_ms != self._rcvtimeo:
                _setsockopt(router, _RCVTIMEO, timeout_ms)
                self._rcvtimeo = timeout_ms
            while True:
                # a loop draining its inbox asks with timeout 0 after every message: an empty
                # queue answers without a zmq.Again (pyzmq's raise costs ~3x the question)
                if poll and not _getsockopt(router, _EVENTS) & _POLLIN:
                    return None
                sender = _recv(router)
                # A ROUTER always delivers the routing id plus at least one frame. Frames
                # under the zero-copy threshold come back as bytes, larger ones as views
                # of libzmq's own buffer.
                frame = head = _recv(router, 0, False)
                frames: list[Buffer] = [
                    frame.bytes if len(frame) < ZERO_COPY_THRESHOLD else frame.buffer
                ]
                while frame.more:
                    frame = _recv(router, 0, False)
                    frames.append(frame.bytes if len(frame) < ZERO_COPY_THRESHOLD else frame.buffer)
                peer = self._connections.get(sender)
                if peer is None:
                    if sender == _WAKE_ID:
                        self._wake_pending = False
                        self._wakes += 1
                        return None
                    peer = self.peers.resolve(sender, head, frames)
                    if peer is None:
                        if self._proofs.busy:  # held: wait for the answer, and the rest
                            self._proving = True
                            return zmq_proof.receive(self, timeout) if timeout_ms else None
                        if self._turn:  # what waited was dropped: don't block holding
                            self._end_turn()
                        continue
                if self._screen_inbound and self._oversized(frames):
                    # inproc has no wire decoder, so MAXMSGSIZE is enforced here instead.
                    self.dropped_oversized += 1
                    if self._turn:
                        self._end_turn()
                    continue
                if not len(head):  # an envelope: a batch, or an escaped message
                    item = self.open_envelope(peer, frames)
                    if item is None:
                        if self._turn:
                            self._end_turn()
                        continue
                    return item
                return peer, frames
        except zmq.Again:
            return None
        except zmq.ZMQError as exc:
            raise self._closed_error("recv", exc) from exc

    def _oversized(self, frames: list[Buffer]) -> bool:
        cap = self.max_frame_size
        return any(frame_nbytes(frame) > cap for frame in frames)

    def wake(self) -> None:
        with self._wake_lock:
            waker = self._waker
            # One queued wake-up is enough; recv clears the flag when it takes it.
            if waker is None or self._wake_pending:
                return
            self._wake_pending = True
            try:
                waker.send(b"", _NOBLOCK)
            except zmq.ZMQError:
                self._wake_pending = False

    def send_back(self, peer: str, frames: Sequence[Buffer]) -> bool:
        """Answer `peer` over the connection it came in on, not a connection of ours: for
        short-lived peers (a handshake probe) that bind no address. False if it is gone."""
        rid = self.peers.reply_id(peer) if not self._closed else None
        if rid is None:
            return False
        try:
            self._router.send_multipart([rid, *frames], _NOBLOCK)
        except zmq.ZMQError:
            return False
        return True

    # -- connections ----------------------------------------------------------------------

    def _touch(self, to: str) -> None:
        self._last_to = to
        self._peers.move_to_end(to)
        self._used[to] = time.monotonic()

    def close_idle(self, max_idle_s: float) -> int:
        """Close outbound connections not switched to for `max_idle_s` seconds; how many
        closed. (They reopen on the next send; the one in use is never closed.)"""
        if self._closed:
            return 0
        self.peers.reap()  # forget inbound connections that closed meanwhile, too
        cutoff = time.monotonic() - max_idle_s
        closed = 0
        for peer in list(self._peers):
            if self._used.get(peer, 0.0) > cutoff:
                break  # in LRU order: the rest were used more recently
            if peer != self._last_to:
                self.disconnect(peer)
                closed += 1
        return closed

    def _connect(self, to: str) -> zmq.Socket[bytes]:
        if self._closed:
            raise TransportError(f"endpoint {self.address!r} is closed; cannot send to {to!r}")
        if not to.startswith(_SCHEMES):
            raise TransportError(
                f"zmq endpoint cannot reach {to!r}: peer addresses must be tcp://, ipc:// or "
                "inproc://"
            )
        dealer = self._context.socket(zmq.DEALER)
        try:
            dealer.linger = self._linger_ms
            dealer.sndhwm = self._sndhwm
            prepare_dealer(dealer, to, self.credentials, self.address)
            dealer.connect(to)
        except zmq.ZMQError as exc:
            dealer.close(linger=0)
            raise TransportError(f"cannot connect to {to!r}: {exc}") from exc
        while len(self._peers) >= self._max_peers:
            # Least recently used first; close() lingers to flush what it still queues.
            old = next(iter(self._peers))
            self._flush_gone(old)
            evicted = self._peers.pop(old)
            self._used.pop(old, None)
            evicted.close()
        self._peers[to] = dealer
        if self._batches_to(to):
            self._batchable.add(to)
        self._touch(to)
        return dealer

    def thread_sender(self) -> ZmqThreadSender:
        """A send-only handle for ONE other thread, so it can send without the loop's help.

        Messages it sends arrive from this endpoint's address, but on their own connection:
        there is no ordering between them and what the endpoint itself sends.
        """
        if self._closed:
            raise TransportError(f"endpoint {self.address!r} is closed")
        sender = ZmqThreadSender(self)
        self._thread_senders.add(sender)
        return sender

    def disconnect(self, peer: str) -> None:
        if self._closed:
            raise TransportError(f"endpoint {self.address!r} is closed; cannot disconnect")
        self._flush_gone(peer)
        dealer = self._peers.pop(peer, None)
        self._used.pop(peer, None)
        if peer == self._last_to:
            self._last_to = ""
        if dealer is not None:
            dealer.close()

    def connected_peers(self) -> list[str]:
        """Peers with an open outbound connection, sorted."""
        return sorted(self._peers)

    # -- teardown -------------------------------------------------------------------------

    def close(self) -> None:
        if self._closed:
            return
        try:
            self.flush()  # (close lingers to send what its DEALERs queue)
            for peer in list(self._held_back):
                self._drop_held_back(peer, "this endpoint closed")
        except Exception:  # noqa: BLE001 - nothing may keep close from releasing
            logger.debug("%s: flush at close failed", self.address, exc_info=True)
        self._closed = True
        self._release_all()
        self._track_closed()

    def _release_all(self) -> None:
        self._closed = True
        with self._wake_lock:
            waker = getattr(self, "_waker", None)
            self._waker = None
        if waker is not None:
            waker.close()
        for to, dealer in self._peers.items():
            # close() lingers to flush what is queued; to an ipc peer whose socket file is
            # gone (it closed first, as a driver that stops its node) nothing can be flushed.
            dealer.close(linger=0 if _ipc_peer_gone(to) else None)
        self._peers.clear()
        for sender in list(getattr(self, "_thread_senders", ())):
            sender.close()
        peers = getattr(self, "peers", None)
        if peers is not None:
            peers.close()
        router = getattr(self, "_router", None)
        if router is not None:
            router.close()
        context, self._context = self._context, None  # type: ignore[assignment]
        if context is not None:
            shared_context.release()
        # libzmq unlinks the file it bound, but from its I/O thread; make sure it is gone.
        paths = [self._ipc_path] if self._ipc_path is not None else []
        for path in paths + getattr(self, "_extra_ipc_paths", []):
            try:
                if stat.S_ISSOCK(os.stat(path).st_mode):
                    os.unlink(path)
            except FileNotFoundError:
                pass

    def _closed_error(self, operation: str, exc: zmq.ZMQError) -> TransportError:
        if self._closed or exc.errno == errno.ENOTSOCK:
            return TransportError(f"endpoint {self.address!r} is closed; cannot {operation}")
        return TransportError(f"{operation} on {self.address!r} failed: {exc}")


def open_zmq_endpoint(address: str, **options: Any) -> ZmqEndpoint:
    """Registry factory for tcp://, ipc:// and inproc://."""
    return ZmqEndpoint(address, **options)
