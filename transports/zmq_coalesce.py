"""The coalescing half of `ZmqEndpoint`: holding small messages per peer, sending them as
batches, and handing out the messages of batches received (format: `zmq_batch`).

What is held and when it goes: the first small message to a peer since the last flush goes
at once (a lone message never waits); the small ones after it are held, and sent as one
frame when the endpoint next receives (unless that receive returns the next message of a
batch received, up to `TURN_RECVS` times), on `flush`, `disconnect` or `close`, when the
batch reaches `MAX_BATCH` messages or `MAX_BATCH_BYTES` bytes, or before a large message
to that peer (order per peer is kept exactly). Threads' senders (`zmq_thread_sender`) never hold anything.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import zmq

from zmesh.protocol.codec import DropWarnings

from . import zmq_batch
from .base import Buffer, frame_nbytes
from .zmq_thread_sender import ZERO_COPY_THRESHOLD

__all__ = ["FRESH", "Coalescing"]

logger = logging.getLogger("zmesh.transports.zmq")
FRESH = zmq_batch.Batch()
"""A marker: no message to this peer since the last flush."""
_COALESCED = ("tcp://", "ipc://")  # where `coalesce` batches (benchmarks/results/stop21)
_NOBLOCK = zmq.NOBLOCK
_SNDMORE = zmq.NOBLOCK | zmq.SNDMORE
_send: Callable[..., Any] = zmq.backend.Socket.send


class Coalescing:
    """Mixed into `ZmqEndpoint` (owner thread only, like the rest of it)."""

    address: str
    _closed: bool
    _router: zmq.Socket[bytes]
    _peers: dict[str, zmq.Socket[bytes]]
    max_frame_size: int

    def _init_coalescing(self, coalesce: bool) -> None:
        # peers whose small messages may be batched; the peers sent to since the last
        # flush, each with its batch (None: none held); messages of batches received and
        # not yet returned
        self._batchable: set[str] = set()
        self._turn: dict[str, zmq_batch.Batch | None] = {}
        self._turn_recvs = 0
        self._inbox: deque[tuple[str, list[Buffer]]] = deque()
        self._coalesce = coalesce
        self._warnings = DropWarnings(logger)
        self.dropped_malformed = 0
        """Inbound envelopes (batches) dropped as malformed."""
        self.dropped_unflushed = 0
        """Held messages lost because their batch could not be sent (a full queue)."""
        self.batches_sent = 0
        """Batches sent (frames that held two messages or more)."""
        self.batched_messages = 0
        """Messages sent inside those batches."""

    def _flush_gone(self, peer: str) -> None:
        """`peer`'s connection is about to close: send what it holds first."""
        batch = self._turn.pop(peer, None)
        if batch is not None:
            self._flush_peer(peer, batch)
            self._turn.pop(peer, None)
        self._batchable.discard(peer)

    @staticmethod
    def _send_parts(dealer: zmq.Socket[bytes], frames: Sequence[Buffer],
                    sizes: Sequence[int]) -> None:
        last = len(sizes) - 1
        for index, frame in enumerate(frames):
            size = sizes[index]
            flags = _NOBLOCK if index == last else _SNDMORE
            _send(dealer, frame, flags, size < ZERO_COPY_THRESHOLD)

    def _hold(self, to: str, frames: Sequence[Buffer], sizes: list[int]) -> bool:
        """A multi-frame message to a batchable peer: True if held in its batch; else its
        batch is sent (order) and the caller sends the message itself."""
        batch = self._turn.get(to, FRESH)
        total = sum(sizes)
        if not sizes[0] or total >= zmq_batch.SMALL or batch is FRESH:
            if batch is FRESH:
                self._turn[to] = None
            elif batch is not None:
                self._flush_peer(to, batch)
            return False
        if batch is None:
            batch = self._turn[to] = zmq_batch.Batch()
        elif batch.wire + total + 4 * len(sizes) > min(self.max_frame_size,
                                                        zmq_batch.MAX_BATCH_BYTES):
            self._flush_peer(to, batch)
            batch = self._turn[to] = zmq_batch.Batch()
        batch.add(frames, sizes)
        if batch.messages >= zmq_batch.MAX_BATCH:
            self._flush_peer(to, batch)
        return True

    def _flush_peer(self, to: str, batch: zmq_batch.Batch) -> None:
        """Send what `to`'s batch holds; the peer stays in the turn (later ones are held)."""
        self._turn[to] = None
        dealer = self._peers.get(to)
        if dealer is None:
            return
        frames = batch.wire_frames()
        try:
            self._send_parts(dealer, frames, [frame_nbytes(f) for f in frames])
            if batch.messages > 1:
                self.batches_sent += 1
                self.batched_messages += batch.messages
        except zmq.ZMQError as exc:
            self.dropped_unflushed += batch.messages
            self._warnings.warn("%s: dropped %d held message(s) to %s: %s", self.address,
                                batch.messages, to, exc)

    def flush(self) -> None:
        """Send every batch held (see `coalesce`); what follows is held again only after
        another message to the same peer went at once."""
        turn = self._turn
        for to, batch in turn.items():
            if batch is not None:
                self._flush_peer(to, batch)
        turn.clear()
        self._turn_recvs = 0

    @property
    def coalesce(self) -> bool:
        """Whether small messages to tcp and ipc peers are batched (class docstring)."""
        return self._coalesce

    @coalesce.setter
    def coalesce(self, value: bool) -> None:
        if not value:
            self.flush()
        self._coalesce = bool(value)
        self._batchable = {p for p in self._peers if self._batches_to(p)}

    def _batches_to(self, to: str) -> bool:
        return self._coalesce and to.startswith(_COALESCED)

    def _end_turn(self) -> None:
        """Before a receive: flush the batches, unless the receive returns the next message
        of a batch already here (its answers may join them; at most TURN_RECVS times).

        Why not also while messages wait on the socket: a peer waiting for our answer (a
        synchronous call) sent one message, and its answer would wait behind whatever else
        is queued. A batch comes from a peer that pipelines, and it is all here already."""
        if self._inbox and self._turn_recvs < zmq_batch.TURN_RECVS:
            self._turn_recvs += 1
            return
        self.flush()

    def open_envelope(self, peer: str, frames: list[Buffer]) -> tuple[str, list[Buffer]] | None:
        """The first message an envelope from `peer` holds (the rest wait in the inbox,
        returned by the next receives in order); None, counted and warned, if malformed."""
        messages = zmq_batch.unwrap(frames)
        if messages is None:
            self.dropped_malformed += 1
            self._warnings.warn("%s: dropped a malformed batch from %s (%d frames)",
                                self.address, peer, len(frames))
            return None
        if len(messages) > 1:
            self._inbox.extend([(peer, message) for message in messages[1:]])
        return peer, messages[0]

