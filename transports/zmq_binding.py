"""How a `ZmqEndpoint` binds its inbound ROUTER: tcp CURVE-gated, ipc checked first.

Split from `zmq_transport` so that module holds the hot path and the outbound connections;
this mixin holds the one-off work of binding (and `bind_also`'s second addresses), with the
checks that make a bind fail loudly instead of silently taking over another process's ipc
socket or binding a path the kernel would truncate.
"""

from __future__ import annotations

import os
import stat

import zmq

from zmesh.errors import TransportError
from zmesh.security.keys import ClusterCredentials

from .zmq_context import ipc_socket_in_use, new_router, shared_context

__all__ = ["Binding"]

_MAX_IPC_PATH = 107  # sun_path is 108 bytes including the NUL


class Binding:
    """The binding half of `ZmqEndpoint` (a mixin: the endpoint sets the attributes below)."""

    address: str
    credentials: ClusterCredentials | None
    _closed: bool
    _context: zmq.Context[zmq.Socket[bytes]]
    _router: zmq.Socket[bytes]
    _ipc_path: str | None
    _extra_ipc_paths: list[str]
    _also: list[str]

    def _bind_router(self, address: str, max_frame_size: int, rcvhwm: int) -> zmq.Socket[bytes]:
        router = new_router(self._context)
        self._router = router  # so _release_all closes it if binding fails
        router.linger = 0
        router.setsockopt(zmq.ROUTER_MANDATORY, 1)
        # Each connection gets a routing id of the ROUTER's making; one that brings its own
        # (inproc peers, or a stranger) cannot take over a live connection's.
        router.setsockopt(zmq.ROUTER_HANDOVER, 0)
        router.setsockopt(zmq.MAXMSGSIZE, max_frame_size)
        router.rcvhwm = rcvhwm
        self._bind_at(router, address)
        if address.startswith("ipc://"):
            self._ipc_path = router.getsockopt_string(zmq.LAST_ENDPOINT)[len("ipc://") :]
        return router

    def _bind_at(self, router: zmq.Socket[bytes], address: str) -> None:
        """Bind `router` at `address` (tcp port 0: any free port; ipc: checked first).

        libzmq takes a copy of the socket's options at each bind, so a tcp bind is CURVE and
        ZAP-gated while an ipc bind of the same ROUTER stays plain.
        """
        target = address
        if address.startswith("tcp://") and address.endswith(":0"):
            target = address[:-2] + ":*"
        elif address.startswith("ipc://"):
            self._check_ipc_path(address[len("ipc://") :])
        creds = self.credentials if address.startswith("tcp://") else None
        if creds is not None:
            router.zap_domain = shared_context.gate().admit(creds).encode()
            # Without a ZAP handler libzmq would admit any CURVE client; refuse instead.
            router.setsockopt(zmq.ZAP_ENFORCE_DOMAIN, 1)
            router.curve_server = True
            router.curve_secretkey = creds.curve_secret
        else:
            router.curve_server = False
        try:
            router.bind(target)
        except zmq.ZMQError as exc:
            raise TransportError(f"cannot bind {address!r}: {exc}") from exc

    @staticmethod
    def _check_ipc_path(path: str) -> None:
        if path == "*":
            return
        if len(path.encode()) > _MAX_IPC_PATH:
            raise TransportError(
                f"ipc path {path!r} is {len(path.encode())} bytes, over the {_MAX_IPC_PATH}-byte "
                "limit of unix sockets; choose a shorter directory"
            )
        try:
            mode = os.stat(path).st_mode
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(mode):
            raise TransportError(f"cannot bind ipc path {path!r}: it exists and is not a socket")
        # libzmq silently unlinks a stale socket file; make sure nobody is still serving on it.
        if not ipc_socket_in_use(path):
            return
        raise TransportError(f"cannot bind {'ipc://' + path!r}: another process is serving on it")

    def _bound_address(self, requested: str) -> str:
        if requested.startswith("inproc://"):
            return requested
        return self._router.getsockopt_string(zmq.LAST_ENDPOINT)

    def bind_also(self, address: str) -> str:
        """Bind the inbound ROUTER at a second address (a node's ipc socket beside its tcp one).

        Messages that arrive there are received like any other; outbound messages still carry
        this endpoint's primary address as the sender. Returns the address actually bound.
        """
        if self._closed:
            raise TransportError(f"endpoint {self.address!r} is closed; cannot bind {address!r}")
        if not address.startswith(("tcp://", "ipc://")):
            raise TransportError(f"bind_also takes a tcp:// or ipc:// address, got {address!r}")
        self._bind_at(self._router, address)
        bound = self._router.getsockopt_string(zmq.LAST_ENDPOINT)
        if bound.startswith("ipc://"):
            self._extra_ipc_paths.append(bound[len("ipc://") :])
        self._also.append(bound)
        return bound

    def bound_addresses(self) -> list[str]:
        """Every address this endpoint receives at: its own, then those of `bind_also`."""
        return [self.address, *self._also]
