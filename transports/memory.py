"""A deterministic in-memory network of endpoints (`mem://name`) for sans-IO and unit tests.

Same interface and guarantees as the zmq transport, no sockets: a send appends to the
receiver's inbox under a lock, so delivery is FIFO per pair (in fact per receiver, in send
order) and immediate. Sending to a name nobody has bound raises, since that is detectable here.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

from zmesh.errors import TransportError

from .base import Buffer, Endpoint, frame_nbytes

__all__ = ["DEFAULT_MAX_FRAME_SIZE", "MemoryEndpoint", "MemoryNetwork", "open_memory_endpoint"]

DEFAULT_MAX_FRAME_SIZE = 256 * 1024 * 1024
_SCHEME = "mem://"


class MemoryNetwork:
    """A set of `mem://` endpoints that can reach each other; thread-safe."""

    _default: MemoryNetwork | None = None
    _default_lock = threading.Lock()

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._endpoints: dict[str, MemoryEndpoint] = {}

    @classmethod
    def default(cls) -> MemoryNetwork:
        """The process-wide network used by `open_endpoint("mem://...")` without `network=`."""
        with cls._default_lock:
            if cls._default is None:
                cls._default = cls()
            return cls._default

    def open(self, address: str, *, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> MemoryEndpoint:
        """Bind `address` (`mem://name`) on this network; raises TransportError if taken."""
        if not address.startswith(_SCHEME) or len(address) == len(_SCHEME):
            raise TransportError(f"memory address {address!r} must look like 'mem://name'")
        if max_frame_size <= 0:
            raise TransportError(f"max_frame_size must be positive, got {max_frame_size}")
        with self._lock:
            if address in self._endpoints:
                raise TransportError(f"memory address {address!r} is already bound")
            endpoint = MemoryEndpoint(self, address, max_frame_size)
            self._endpoints[address] = endpoint
        endpoint._track_open()
        return endpoint

    def addresses(self) -> list[str]:
        """Addresses currently bound, sorted."""
        with self._lock:
            return sorted(self._endpoints)

    def close(self) -> None:
        """Close every endpoint still bound on this network."""
        with self._lock:
            endpoints = list(self._endpoints.values())
        for endpoint in endpoints:
            endpoint.close()

    def _lookup(self, address: str) -> MemoryEndpoint | None:
        with self._lock:
            return self._endpoints.get(address)

    def _unbind(self, endpoint: MemoryEndpoint) -> None:
        with self._lock:
            if self._endpoints.get(endpoint.address) is endpoint:
                del self._endpoints[endpoint.address]


class MemoryEndpoint(Endpoint):
    """One bound `mem://` address; see `Endpoint` for the contract."""

    def __init__(self, network: MemoryNetwork, address: str, max_frame_size: int) -> None:
        self.address = address
        self.max_frame_size = max_frame_size
        self._network = network
        self._cond = threading.Condition(threading.Lock())
        self._inbox: deque[tuple[str, list[Buffer]]] = deque()
        self._woken = False
        self._closed = False
        self.dropped_oversized = 0

    @property
    def closed(self) -> bool:
        return self._closed

    def send(self, to: str, frames: Sequence[Buffer]) -> None:
        if self._closed:
            raise TransportError(f"endpoint {self.address!r} is closed; cannot send to {to!r}")
        if not frames:
            raise TransportError(f"message to {to!r} has no frames; send at least one")
        copied: list[Buffer] = []
        largest = 0
        for index, frame in enumerate(frames):
            size = frame_nbytes(frame)
            if size > self.max_frame_size:
                raise TransportError(
                    f"frame {index} to {to!r} is {size} bytes, over the cap of "
                    f"{self.max_frame_size} bytes (max_frame_size)"
                )
            largest = max(largest, size)
            # The receiver gets its own snapshot, as it would over a real socket.
            copied.append(frame if type(frame) is bytes else bytes(memoryview(frame)))
        peer = self._network._lookup(to)
        if peer is None:
            raise TransportError(f"no memory endpoint is bound at {to!r}")
        peer._deliver(self.address, copied, largest)

    def _deliver(self, sender: str, frames: list[Buffer], largest: int) -> None:
        with self._cond:
            if self._closed:
                raise TransportError(f"no memory endpoint is bound at {self.address!r}")
            if largest > self.max_frame_size:
                # Like libzmq's MAXMSGSIZE: the receiver refuses it and the sender never knows.
                self.dropped_oversized += 1
                return
            self._inbox.append((sender, frames))
            self._cond.notify()

    def recv(self, timeout: float | None = None) -> tuple[str, list[Buffer]] | None:
        deadline = None if timeout is None else time.monotonic() + max(timeout, 0.0)
        with self._cond:
            while True:
                if self._closed:
                    raise TransportError(f"endpoint {self.address!r} is closed; cannot recv")
                if self._inbox:
                    return self._inbox.popleft()
                if self._woken:
                    self._woken = False
                    return None
                if deadline is None:
                    self._cond.wait()
                    continue
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._cond.wait(remaining)

    def wake(self) -> None:
        with self._cond:
            self._woken = True
            self._cond.notify_all()

    def disconnect(self, peer: str) -> None:
        # There is no connection state to drop; only the closed check matters.
        if self._closed:
            raise TransportError(f"endpoint {self.address!r} is closed; cannot disconnect")

    def close(self) -> None:
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._inbox.clear()
            self._cond.notify_all()
        self._network._unbind(self)
        self._track_closed()


def open_memory_endpoint(
    address: str, *, network: MemoryNetwork | None = None, **options: Any
) -> MemoryEndpoint:
    """Registry factory for `mem://`: bind on `network` (default: the process-wide one)."""
    return (network or MemoryNetwork.default()).open(address, **options)
