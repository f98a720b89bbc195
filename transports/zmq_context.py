"""The process's one zmq Context, its ZAP handler, and the set-up of outbound sockets.

All zmq endpoints of a process share one Context (inproc needs that), reference-counted so
that closing the last endpoint stops the ZAP handler and terminates the Context and its I/O
threads; after a fork the child starts afresh.
"""

from __future__ import annotations

import itertools
import os
import socket
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

import zmq

from zmesh.errors import TransportError
from zmesh.security.identity import client_metadata, process_keys
from zmesh.security.keys import ClusterCredentials

if TYPE_CHECKING:  # the ZAP handler pulls in zmq.auth and asyncio: only a mesh needs it
    from zmesh.security.zap import ZapGate

__all__ = [
    "INPROC_MARK", "IO_THREADS_ENV", "io_threads", "ipc_socket_in_use", "new_router",
    "prepare_dealer", "shared_context",
]

INPROC_MARK = "|"
"""Separates an inproc DEALER's sender name from its number in its routing id."""
_inproc_ids = itertools.count()


def ipc_socket_in_use(path: str) -> bool:
    """True when a process accepts connections on the unix socket at `path`."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
    except OSError:
        return False
    finally:
        probe.close()
    return True


IO_THREADS_ENV = "ZMESH_IO_THREADS"


def io_threads() -> int:
    """libzmq I/O threads of the process's Context: $ZMESH_IO_THREADS, default 1. CURVE
    encrypts and decrypts on them, one connection per thread at a time, so a process with
    several busy tcp peers may go faster with more (given the cores)."""
    raw = os.environ.get(IO_THREADS_ENV, "").strip()
    if not raw:
        return 1
    try:
        value = int(raw)
    except ValueError:
        raise TransportError(f"${IO_THREADS_ENV} must be a whole number, got {raw!r}") from None
    if not 1 <= value <= 64:
        raise TransportError(f"${IO_THREADS_ENV} must be between 1 and 64, got {value}")
    return value


def _libc_srand() -> Callable[[int], object] | None:
    import ctypes  # (~20 ms to import: only once a ROUTER is made)

    try:
        srand = ctypes.CDLL(None).srand
    except (OSError, AttributeError, TypeError):
        return None  # no C runtime to reach this way (Windows): ids stay libzmq's own
    srand.argtypes = [ctypes.c_uint]
    srand.restype = None
    return srand


_srand: Callable[[int], object] | None | bool = False  # False: not looked up yet
_router_lock = threading.Lock()


def new_router(context: zmq.Context[zmq.Socket[bytes]]) -> zmq.Socket[bytes]:
    """A ROUTER whose self-made routing ids no peer can predict.

    libzmq numbers the connections that bring no routing id of their own from a counter that
    starts at C ``rand()``, 0x00 then 0x6b8b4567 in a process that never seeded it, and aborts
    the whole process (``socket_base.cpp`` assertion) when the next number is already taken
    by a peer that chose it as its ``ZMQ_ROUTING_ID`` (any same-user process over ipc, any
    member over tcp). Seeding ``rand()`` from the OS just before the ROUTER is made leaves a
    peer a 2**-32 guess per connection instead of a sure hit.
    """
    global _srand
    with _router_lock:
        if _srand is False:
            _srand = _libc_srand()
        if callable(_srand):
            _srand(int.from_bytes(os.urandom(4), "little"))
        return context.socket(zmq.ROUTER)


class _SharedContext:
    """One zmq Context per process, alive while at least one endpoint holds it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._context: zmq.Context[zmq.Socket[bytes]] | None = None
        self._gate: ZapGate | None = None
        self._users = 0
        self._pid = 0

    def acquire(self) -> zmq.Context[zmq.Socket[bytes]]:
        with self._lock:
            if self._context is None or self._pid != os.getpid():
                # After fork the parent's context is unusable; start afresh in the child.
                self._context = zmq.Context(io_threads=io_threads())
                self._gate = None  # the parent's ZAP thread does not exist in a child
                self._users = 0
                self._pid = os.getpid()
            self._users += 1
            return self._context

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users > 0 or self._context is None:
                return
            context, self._context = self._context, None
            gate, self._gate = self._gate, None
        if gate is not None:
            gate.stop()
        context.term()

    def gate(self) -> ZapGate:
        """The ZAP handler of the shared context (started on first use)."""
        with self._lock:
            if self._context is None:
                raise TransportError("the zmq context is closed")
            if self._gate is None:
                from zmesh.security.zap import ZapGate

                self._gate = ZapGate(self._context)
            return self._gate


shared_context = _SharedContext()
"""The process-wide Context that every zmq endpoint and probe uses."""


def prepare_dealer(
    dealer: zmq.Socket[bytes], to: str, credentials: ClusterCredentials | None, sender: str
) -> None:
    """Set up `dealer` (not yet connected) to go to `to` as `sender`.

    tcp and ipc peers learn who we are from the ZMTP metadata of each (re)connection (see
    `zmesh.security.identity`); to a tcp peer of a mesh the DEALER is a CURVE client with this
    process's own key pair. inproc has no metadata, so there the routing id names the sender
    (plus `INPROC_MARK` and a number).
    """
    if to.startswith("inproc://"):
        # A number of its own per DEALER: a reconnect must not collide with the id of a
        # connection the ROUTER has not dropped yet (it ignores duplicates).
        dealer.setsockopt(zmq.ROUTING_ID, f"{sender}{INPROC_MARK}{next(_inproc_ids)}".encode())
        return
    for prop in client_metadata(credentials, sender):
        dealer.setsockopt(zmq.METADATA, prop)
    if credentials is not None and to.startswith("tcp://"):
        keys = process_keys()
        dealer.curve_publickey = keys.public
        dealer.curve_secretkey = keys.secret
        dealer.curve_serverkey = credentials.curve_public
