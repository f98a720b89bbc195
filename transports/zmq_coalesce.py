"""The coalescing half of `ZmqEndpoint`: holding small messages per peer, sending them as
batches, and handing out the messages of batches received (format: `zmq_batch`).

What is held and when it goes: the first small message to a peer since the last flush goes
at once (a lone message never waits); the small ones after it are held, and sent as one
frame when the endpoint next receives (unless that receive returns the next message of a
batch received, up to `TURN_RECVS` times), on `flush`, `disconnect` or `close`, when the
batch reaches `MAX_BATCH` messages or `MAX_BATCH_BYTES` bytes, or before a large message
to that peer (order per peer is kept exactly). Threads' senders (`zmq_thread_sender`) never hold anything.

What is held is never dropped while its peer is merely slow: a batch that meets the peer's
full send queue (`sndhwm`) when it is due stays held back (`HELD_BACK`), and goes as soon
as the queue has room (each flush retries it, and a receive waits for that room as well as
for input). Meanwhile nothing to that peer may pass it: a send that would have to wait
behind it raises the error an unbuffered send gets at a full queue, so held back is at most
one batch per peer. Held messages are lost only with their peer's connection (`disconnect`,
an eviction, `close`) or when coalescing is turned off, counted in `dropped_unflushed`.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import zmq

from zmesh.protocol.codec import DropWarnings

from . import zmq_batch
from .base import Buffer, frame_nbytes
from .zmq_thread_sender import ZERO_COPY_THRESHOLD

__all__ = ["FRESH", "HELD_BACK", "Coalescing"]

logger = logging.getLogger("zmesh.transports.zmq")
FRESH = zmq_batch.Batch()
"""A marker: no message to this peer since the last flush."""
HELD_BACK = zmq_batch.Batch()
"""A marker: this peer's due batch met a full queue and waits (in `_held_back`). Its size
is past any bound, so a send to the peer tries to send the batch before it holds more."""
HELD_BACK.wire = 1 << 62
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
        # due batches that met a full queue: their wire frames and message counts
        self._held_back: dict[str, tuple[list[Buffer], int]] = {}
        self._coalesce = coalesce
        self._warnings = DropWarnings(logger)
        self.dropped_malformed = 0
        """Inbound envelopes (batches) dropped as malformed."""
        self.dropped_unflushed = 0
        """Held messages lost: their peer's connection closed (disconnect, eviction, close)
        or coalescing was turned off while a full queue held them back."""
        self.batches_sent = 0
        """Batches sent (frames that held two messages or more)."""
        self.batched_messages = 0
        """Messages sent inside those batches."""

    def _flush_gone(self, peer: str) -> None:
        """`peer`'s connection is about to close: send what it holds first (what its full
        queue still refuses is lost with the connection, counted)."""
        batch = self._turn.pop(peer, None)
        if batch is not None and not self._flush_peer(peer, batch):
            self._drop_held_back(peer, "its connection closes")
        self._turn.pop(peer, None)
        self._batchable.discard(peer)

    def _drop_held_back(self, peer: str, why: str) -> None:
        held = self._held_back.pop(peer, None)
        if held is not None:
            self.dropped_unflushed += held[1]
            self._warnings.warn("%s: dropped %d held message(s) to %s: its queue was full "
                                "and %s", self.address, held[1], peer, why)

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
            elif batch is not None and not self._flush_peer(to, batch):
                raise zmq.Again()  # it would pass what is held back
            return False
        if batch is None:
            batch = self._turn[to] = zmq_batch.Batch()
        elif batch.wire + total + 4 * len(sizes) > min(self.max_frame_size,
                                                        zmq_batch.MAX_BATCH_BYTES):
            if not self._flush_peer(to, batch):
                raise zmq.Again()  # the queue is full: not accepted, as unbuffered
            batch = self._turn[to] = zmq_batch.Batch()
        batch.add(frames, sizes)
        if batch.messages >= zmq_batch.MAX_BATCH:
            self._flush_peer(to, batch)  # (held back if the queue is full: still accepted)
        return True

    def _flush_peer(self, to: str, batch: zmq_batch.Batch) -> bool:
        """Send what `to`'s batch holds (HELD_BACK: the batch held back); the peer stays in
        the turn (later ones are held). False if the peer's queue is full: the batch is
        then held back, and `to`'s turn is HELD_BACK until it goes."""
        self._turn[to] = None
        if batch is HELD_BACK:
            frames, messages = self._held_back[to]
        else:
            frames, messages = batch.wire_frames(), batch.messages
        dealer = self._peers.get(to)
        try:
            if dealer is None:
                raise zmq.ZMQError(msg="no connection")
            self._send_parts(dealer, frames, [frame_nbytes(f) for f in frames])
        except zmq.Again:
            self._held_back[to] = (frames, messages)
            self._turn[to] = HELD_BACK
            return False
        except zmq.ZMQError as exc:
            self._held_back.pop(to, None)
            self.dropped_unflushed += messages
            self._warnings.warn("%s: dropped %d held message(s) to %s: %s", self.address,
                                messages, to, exc)
            return True
        if batch is HELD_BACK:
            del self._held_back[to]
        if messages > 1:
            self.batches_sent += 1
            self.batched_messages += messages
        return True

    def flush(self) -> None:
        """Send every batch held (see `coalesce`); what follows is held again only after
        another message to the same peer went at once."""
        turn = self._turn
        for to, batch in turn.items():
            if batch is not None:
                self._flush_peer(to, batch)
        turn.clear()
        self._turn_recvs = 0
        if self._held_back:  # still due: tried again by the next flush
            turn.update(dict.fromkeys(self._held_back, HELD_BACK))

    def _await_room(self, timeout: float | None) -> float | None:
        """Before a receive blocks while batches are held back: wait (up to `timeout`) for
        input, or for room in a held-back peer's queue (then send its batch). The timeout
        left for the receive: 0 when input came or time ran out (take what is there, do not
        block with the batches still held back), else what remains."""
        deadline = None if timeout is None else time.monotonic() + timeout
        router = self._router
        while self._held_back:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            poller = zmq.Poller()
            poller.register(router, zmq.POLLIN)
            for to in self._held_back:
                if to in self._peers:
                    poller.register(self._peers[to], zmq.POLLOUT)
            ready = poller.poll(None if left is None else math.ceil(left * 1000))
            if not ready or any(sock is router for sock, _ in ready):
                return 0.0
            self.flush()
        return None if deadline is None else max(0.0, deadline - time.monotonic())

    @property
    def coalesce(self) -> bool:
        """Whether small messages to tcp and ipc peers are batched (class docstring)."""
        return self._coalesce

    @coalesce.setter
    def coalesce(self, value: bool) -> None:
        if not value:
            self.flush()
            for peer in list(self._held_back):
                self._drop_held_back(peer, "coalescing was turned off")
                self._turn.pop(peer, None)
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

