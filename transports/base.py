"""The transport interface: one inbound endpoint per process, sending to peers by address.

Every transport (zmq tcp/ipc/inproc, the in-memory network, the chaos wrapper) implements
`Endpoint`; the runtime never touches a socket directly. Live endpoints are tracked so that
tests can fail when one is left open.
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from zmesh.errors import TransportError

if TYPE_CHECKING:
    # Only for annotations: `typing_extensions.Buffer` (PEP 688) is what mypy checks against;
    # at run time zmesh does not depend on typing_extensions.
    from typing_extensions import Buffer
else:
    Buffer = bytes | bytearray | memoryview

__all__ = ["Buffer", "Endpoint", "frame_nbytes", "live_endpoints"]

_live_lock = threading.Lock()
_live: dict[int, Endpoint] = {}


def live_endpoints() -> list[Endpoint]:
    """Endpoints opened in this process and not yet closed (for leak checks)."""
    with _live_lock:
        return list(_live.values())


def frame_nbytes(frame: Buffer) -> int:
    """Size in bytes of one frame; `len()` alone is wrong for numpy arrays and cast views."""
    if type(frame) is bytes:
        return len(frame)
    try:
        return memoryview(frame).nbytes
    except TypeError:
        raise TransportError(
            f"frame of type {type(frame).__name__} does not support the buffer protocol; "
            "frames must be bytes, bytearray, memoryview or another buffer"
        ) from None


class Endpoint(abc.ABC):
    """A bound inbound address plus lazily opened outbound connections to peers.

    Messages are lists of frames (buffers). Delivery between one sender and one receiver is
    FIFO. `recv`, `send`, `disconnect` and `close` belong to one owning thread; only `wake`
    may be called from any thread. Received frames may be zero-copy views, and frames passed
    to `send` may be read after it returns, so a sender must not mutate them afterwards.
    After `close`, every method except `close` and `wake` raises `TransportError`.
    """

    address: str

    @abc.abstractmethod
    def send(self, to: str, frames: Sequence[Buffer]) -> None:
        """Queue one message for the peer bound at `to`, without blocking.

        Raises TransportError if closed, a frame is over the size cap, the outbound queue
        is full, or the peer is unroutable where the transport can tell.
        """

    @abc.abstractmethod
    def recv(self, timeout: float | None = None) -> tuple[str, list[Buffer]] | None:
        """Next inbound message as (sender's address, frames).

        Blocks up to `timeout` seconds (None: forever, 0: poll). Returns None on timeout or
        for a `wake()`. A wake that comes while no recv is blocked is kept, and a later recv
        returns None for it (perhaps ahead of messages already queued), so no wake-up is
        lost; wakes not yet taken by a recv coalesce into one.
        """

    @abc.abstractmethod
    def wake(self) -> None:
        """Make a blocked (or a later) `recv` return None; safe from any thread, even after
        close (then it does nothing)."""

    def thread_sender(self) -> Any:
        """A send-only handle for one other thread, or None if this transport has none."""
        return None

    def flush(self) -> None:
        """Send whatever this endpoint holds back to coalesce (most hold nothing)."""
        return None

    @abc.abstractmethod
    def disconnect(self, peer: str) -> None:
        """Drop the outbound connection to `peer` (a no-op if there is none)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release every socket, thread and file this endpoint holds; idempotent."""

    @property
    @abc.abstractmethod
    def closed(self) -> bool:
        """True once `close()` has run."""

    def __enter__(self) -> Endpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<{type(self).__name__} {self.address!r} {state}>"

    def _track_open(self) -> None:
        """Record this endpoint as live; implementations call it once bound."""
        with _live_lock:
            _live[id(self)] = self

    def _track_closed(self) -> None:
        """Forget this endpoint; implementations call it when close() has released everything."""
        with _live_lock:
            _live.pop(id(self), None)
