"""The ZAP handler: names each CURVE client of a mesh's ROUTERs by its public key.

One `ZapGate` serves one zmq Context (ZAP is per context). The answers are pyzmq's: its
`zmq.auth.base.Authenticator` (the policy behind `ThreadAuthenticator`: NULL admitted,
PLAIN refused, CURVE by the domain's credentials provider) handles each request. Only the
thread that feeds it is ours: `ThreadAuthenticator` runs an asyncio event loop for it, which
pulled asyncio, ssl and subprocess into every node (~1.5 MB of PSS each), while the base
class imports none of them. A client reaches ZAP only after it has
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
from collections.abc import Coroutine
from typing import Any

import zmq
from zmq.auth.base import Authenticator

from zmesh.security.keys import ClusterCredentials

__all__ = ["ZapGate"]

_logger = logging.getLogger("zmesh.zap")
_gates = itertools.count()


class _Admit:
    """The credentials provider pyzmq's authenticator calls for every CURVE handshake."""

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
        self._auth: Authenticator | None = None
        self._domains: dict[str, _Admit] = {}

    def admit(self, credentials: ClusterCredentials) -> str:
        """Start answering for `credentials`' mesh; returns the ZAP domain to set on a ROUTER."""
        domain = credentials.zap_domain
        with self._lock:
            if self._thread is None:
                self._start()
            assert self._auth is not None
            if domain not in self._domains:
                provider = _Admit()
                self._domains[domain] = provider
                self._auth.configure_curve_callback(domain, provider)
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
            self._auth = None  # (its thread closes its socket)
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
        auth = Authenticator(context, log=_logger)
        auth.start()  # binds the Context's ZAP endpoint (inproc://zeromq.zap.01)
        stop_address = f"inproc://zmesh-zap-stop-{next(_gates)}"
        stop = context.socket(zmq.PAIR)
        stop.linger = 0
        stop.bind(stop_address)
        stopper = context.socket(zmq.PAIR)
        stopper.linger = 0
        stopper.connect(stop_address)
        # (the sockets move to the thread: starting it is the memory barrier zmq asks for)
        thread = threading.Thread(target=self._serve, args=(auth, stop), name="zmesh-zap",
                                  daemon=True)
        self._thread, self._stopper, self._auth = thread, stopper, auth
        thread.start()

    @staticmethod
    def _serve(auth: Authenticator, stop: zmq.Socket[bytes]) -> None:
        zap = auth.zap_socket
        poller = zmq.Poller()
        poller.register(zap, zmq.POLLIN)
        poller.register(stop, zmq.POLLIN)
        try:
            while True:
                ready = dict(poller.poll())
                if stop in ready:
                    return
                if zap in ready:
                    _run_at_once(auth.handle_zap_message(zap.recv_multipart()))
        except zmq.ZMQError as exc:  # the context is going away
            if exc.errno != zmq.ETERM:
                _logger.warning("ZAP handler stopped: %s", exc)
        finally:
            auth.stop()
            stop.close(linger=0)


def _run_at_once(step: Coroutine[Any, Any, None]) -> None:
    """Run pyzmq's handler coroutine to its end: it awaits only a provider's awaitable
    answer, and ours answers at once, so one step finishes it (no event loop needed)."""
    try:
        step.send(None)
    except StopIteration:
        return
    step.close()
    raise RuntimeError("the ZAP handler waited: a credentials provider must answer at once")
