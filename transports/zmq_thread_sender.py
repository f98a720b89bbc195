"""A send-only set of outbound DEALERs owned by one thread other than an endpoint's loop.

A user thread that sends over the loop's sockets would have to hand each message to the
loop thread (a wake-up and a GIL hand-off per message); with its own DEALERs it sends
directly. ZeroMQ sockets are not thread-safe, so each thread gets its own sender
(`ZmqEndpoint.thread_sender`). Messages it sends arrive from the endpoint's address (same
credentials and sender name in the connection metadata), but on their own connection: there
is no ordering between them and what the endpoint itself sends.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import zmq

from zmesh.errors import TransportError

from .base import Buffer, frame_nbytes
from .zmq_batch import escape
from .zmq_context import prepare_dealer

if TYPE_CHECKING:
    from .zmq_transport import ZmqEndpoint

__all__ = ["ZERO_COPY_THRESHOLD", "ZmqThreadSender"]

ZERO_COPY_THRESHOLD = 64 * 1024
"""Frames at least this large are sent zero-copy (smaller ones are cheaper to copy)."""
_NOBLOCK = zmq.NOBLOCK
_SNDMORE = zmq.NOBLOCK | zmq.SNDMORE
_send: Callable[..., Any] = zmq.backend.Socket.send

_thread_sender_ids = itertools.count(1)


class ZmqThreadSender:
    """Outbound DEALERs owned by one thread other than the endpoint's (see thread_sender).

    The thread keeps it (a thread-local); the endpoint only a weak reference, so its sockets
    close when the thread ends (a pool of short-lived threads leaves no fds behind).
    `conn_id` names its connections for the whole process lifetime (never reused, unlike
    an `id()`)."""

    def __init__(self, endpoint: ZmqEndpoint) -> None:
        self._endpoint = endpoint
        self._peers: dict[str, zmq.Socket[bytes]] = {}
        self._closed = False
        self._lock = threading.Lock()  # its thread sends, the endpoint's close may close
        self.conn_id = next(_thread_sender_ids)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # at interpreter exit the context may be gone already
            pass

    def send(self, to: str, frames: Sequence[Buffer]) -> None:
        """Send a message; TransportError if closed or the peer's queue is full."""
        with self._lock:  # never on a socket that the endpoint's close is closing
            if self._closed:
                raise TransportError(f"thread sender of {self._endpoint.address!r} is closed")
            dealer = self._peers.get(to)
            if dealer is None:
                dealer = self._connect(to)
            try:
                if len(frames) == 1:  # the common case (a task's result), without a loop
                    frame = frames[0]
                    size = len(frame) if type(frame) is bytes else frame_nbytes(frame)
                    if size:
                        _send(dealer, frame, _NOBLOCK, size < ZERO_COPY_THRESHOLD)
                        return
                if frames and not frame_nbytes(frames[0]):  # an envelope's mark: escape it
                    frames = escape(frames)
                last = len(frames) - 1
                for index, frame in enumerate(frames):
                    size = len(frame) if type(frame) is bytes else frame_nbytes(frame)
                    _send(dealer, frame, _NOBLOCK if index == last else _SNDMORE,
                          size < ZERO_COPY_THRESHOLD)
            except zmq.Again:
                raise TransportError(f"send queue to {to!r} is full") from None
            except zmq.ZMQError as exc:
                raise TransportError(f"cannot send to {to!r}: {exc}") from exc

    def _connect(self, to: str) -> zmq.Socket[bytes]:
        """A new DEALER to `to` (lock held); the oldest goes past the endpoint's bound."""
        ep = self._endpoint
        dealer = ep._context.socket(zmq.DEALER)
        dealer.linger = ep._linger_ms
        dealer.sndhwm = ep._sndhwm
        try:
            prepare_dealer(dealer, to, ep.credentials, ep.address)
            dealer.connect(to)
        except zmq.ZMQError as exc:
            dealer.close(linger=0)
            raise TransportError(f"cannot connect to {to!r}: {exc}") from exc
        if len(self._peers) >= ep._max_peers:  # bounded like the endpoint's, oldest first
            self._peers.pop(next(iter(self._peers))).close()
        self._peers[to] = dealer
        return dealer

    def close(self) -> None:
        """Close its sockets (the endpoint's close does this too, from another thread: the
        lock keeps it from closing a socket mid-send)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for dealer in self._peers.values():
                dealer.close()
            self._peers.clear()
