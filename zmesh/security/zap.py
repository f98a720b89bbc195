"""The ZAP handler: names each CURVE client of a mesh's ROUTERs by its public key.

One `ZapGate` serves one zmq Context (ZAP is per context): pyzmq's `ThreadAuthenticator`
answers libzmq's ZAP requests on a thread of its own. A client reaches ZAP only after it has
completed a CURVE handshake against the mesh's server key, which only token holders can
derive; a client without it never gets a connection and no frame of it reaches Python code.
ZAP then sets the connection's User-Id to the client's own public key (Z85). Whether that key
belongs to a member of this mesh is proven by the vouch the client presents in its ZMTP
metadata, which ZAP does not see: `zmesh.transports.zmq_peers` checks it, once per connection,
before any message of that connection is decoded (see `zmesh.security.identity`).
"""

from __future__ import annotations

import logging
import threading

import zmq
from zmq.auth.thread import ThreadAuthenticator

from zmesh.security.keys import ClusterCredentials

__all__ = ["ZapGate"]


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
        self._auth: ThreadAuthenticator | None = None
        self._domains: dict[str, _Admit] = {}

    def admit(self, credentials: ClusterCredentials) -> str:
        """Start answering for `credentials`' mesh; returns the ZAP domain to set on a ROUTER."""
        domain = credentials.zap_domain
        with self._lock:
            if self._auth is None:
                auth = ThreadAuthenticator(self._context, log=logging.getLogger("zmesh.zap"))
                auth.start()
                self._auth = auth
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
            auth, self._auth = self._auth, None
            self._domains.clear()
        if auth is not None:
            auth.stop()
