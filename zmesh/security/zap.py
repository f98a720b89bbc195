"""The ZAP handler: names each CURVE client of a mesh's ROUTERs by its public key.

One `ZapGate` serves one zmq Context (ZAP is per context) and answers libzmq's ZAP requests
on a thread of its own, with the answers pyzmq's `ThreadAuthenticator` gives (NULL admitted,
PLAIN and unknown mechanisms refused, CURVE by the domain's provider) but without its
asyncio event loop: that pulled asyncio, ssl and subprocess into every node (~3 MB each). A client reaches ZAP only after it has
completed a CURVE handshake against the mesh's server key, which only token holders can
derive; a client without it never gets a connection and no frame of it reaches Python code.
ZAP then sets the connection's User-Id to the client's own public key (Z85). Whether that key
belongs to a member of this mesh is proven by the vouch the client presents in its ZMTP
metadata, which ZAP does not see: `zmesh.transports.zmq_peers` checks it, once per connection,
before any message of that connection is decoded (see `zmesh.security.identity`).
"""

from __future__ import annotations

import itertools
import logging
import threading

import zmq
from zmq.utils import z85

from zmesh.security.keys import ClusterCredentials

__all__ = ["ZapGate"]

ZAP_ENDPOINT = "inproc://zeromq.zap.01"
"""Where libzmq sends a Context's ZAP requests (RFC 27)."""
_VERSION = b"1.0"
_logger = logging.getLogger("zmesh.zap")
_gates = itertools.count()


class _Admit:
    """What a domain's CURVE handshakes are checked with (counted, for tests and stats)."""

    def __init__(self) -> None:
        self.admitted = 0

    def callback(self, domain: str, key: bytes) -> bool:
        # The handshake already proved the client knows the mesh's server key; membership
        # (the vouch) and identity are checked per connection by the ROUTER's owner.
        self.admitted += 1
        return True


class ZapGate:
    """The ZAP handler of one Context; `admit` a mesh before binding a ROUTER for it."""

    def __init__(self, context: zmq.Context[zmq.Socket[bytes]]) -> None:
        self._context = context
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stopper: zmq.Socket[bytes] | None = None
        self._domains: dict[str, _Admit] = {}

    def admit(self, credentials: ClusterCredentials) -> str:
        """Start answering for `credentials`' mesh; returns the ZAP domain to set on a ROUTER."""
        domain = credentials.zap_domain
        with self._lock:
            if domain not in self._domains:
                self._domains[domain] = _Admit()
            if self._thread is None:
                self._start()
        return domain

    def handshakes(self, credentials: ClusterCredentials) -> int:
        """CURVE handshakes completed with that mesh's ROUTERs in this process so far."""
        provider = self._domains.get(credentials.zap_domain)
        return provider.admitted if provider is not None else 0

    def stop(self) -> None:
        """Stop the handler thread (before the Context is terminated)."""
        with self._lock:
            thread, self._thread = self._thread, None
            stopper, self._stopper = self._stopper, None
            self._domains.clear()
        if stopper is not None:
            try:
                stopper.send(b"", zmq.NOBLOCK)
            except zmq.ZMQError:
                pass
        if thread is not None:
            thread.join()
        if stopper is not None:
            stopper.close(linger=0)

    def _start(self) -> None:
        context = self._context
        zap = context.socket(zmq.REP)
        zap.linger = 0
        zap.bind(ZAP_ENDPOINT)
        stop_address = f"inproc://zmesh-zap-stop-{next(_gates)}"
        stop = context.socket(zmq.PAIR)
        stop.linger = 0
        stop.bind(stop_address)
        stopper = context.socket(zmq.PAIR)
        stopper.linger = 0
        stopper.connect(stop_address)
        # (the sockets move to the thread: starting it is the memory barrier zmq asks for)
        thread = threading.Thread(target=self._serve, args=(zap, stop), name="zmesh-zap",
                                  daemon=True)
        self._thread, self._stopper = thread, stopper
        thread.start()

    def _serve(self, zap: zmq.Socket[bytes], stop: zmq.Socket[bytes]) -> None:
        poller = zmq.Poller()
        poller.register(zap, zmq.POLLIN)
        poller.register(stop, zmq.POLLIN)
        try:
            while True:
                ready = dict(poller.poll())
                if stop in ready:
                    return
                if zap in ready:
                    request = zap.recv_multipart()
                    zap.send_multipart(self._answer(request))
        except zmq.ZMQError as exc:  # the context is going away
            if exc.errno != zmq.ETERM:
                _logger.warning("ZAP handler stopped: %s", exc)
        finally:
            zap.close(linger=0)
            stop.close(linger=0)

    def _answer(self, request: list[bytes]) -> list[bytes]:
        """The reply to one ZAP request: [version, request id, status, text, user id, meta]."""
        request_id = request[1] if len(request) > 1 else b""
        if len(request) < 6:
            return _reply(request_id, b"400", b"Not enough frames")
        version, _, domain_raw, _address, _identity, mechanism = request[:6]
        credentials = request[6:]
        if version != _VERSION:
            return _reply(request_id, b"400", b"Invalid version")
        if mechanism == b"NULL":  # a plain (ipc) bind of a ROUTER that also has a ZAP domain
            return _reply(request_id, b"200", b"OK", b"anonymous")
        if mechanism != b"CURVE":
            return _reply(request_id, b"400", b"NO ACCESS")
        if len(credentials) != 1 or len(credentials[0]) != 32:
            return _reply(request_id, b"400", b"Invalid credentials")
        domain = domain_raw.decode("utf-8", "replace") or "*"
        provider = self._domains.get(domain)
        if provider is None:
            return _reply(request_id, b"400", b"Unknown domain")
        key = z85.encode(credentials[0])
        if not provider.callback(domain, key):
            return _reply(request_id, b"400", b"Unknown key")
        return _reply(request_id, b"200", b"OK", key)


def _reply(request_id: bytes, status: bytes, text: bytes, user_id: bytes = b"") -> list[bytes]:
    return [_VERSION, request_id, status, text, user_id if status == b"200" else b"", b""]
