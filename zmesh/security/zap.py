"""The ZAP handler: admits to a CURVE ROUTER only clients holding its mesh's cluster key.

One `ZapGate` serves one zmq Context (ZAP is per context): pyzmq's `ThreadAuthenticator`
answers libzmq's ZAP requests on a thread of its own, and each mesh's ROUTERs use their own
ZAP domain, so one process can serve several meshes (tests do) without mixing them up.
A client refused here never gets a connection: no frame of it reaches Python code.
"""

from __future__ import annotations

import hmac
import logging
import threading

import zmq
from zmq.auth.thread import ThreadAuthenticator

from zmesh.security.keys import ClusterCredentials

__all__ = ["ZapGate"]


class _Admit:
    """The credentials provider pyzmq's authenticator calls for every CURVE handshake."""

    def __init__(self, client_key: bytes) -> None:
        self.client_key = client_key
        self.admitted = 0
        self.refused = 0

    def callback(self, domain: str, key: bytes) -> bool:
        ok = hmac.compare_digest(key, self.client_key)
        if ok:
            self.admitted += 1
        else:
            self.refused += 1
        return ok


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
                provider = _Admit(credentials.curve_public)
                self._domains[domain] = provider
                self._auth.configure_curve_callback(domain, provider)
        return domain

    def counts(self, credentials: ClusterCredentials) -> tuple[int, int]:
        """(admitted, refused) handshakes for that mesh so far."""
        provider = self._domains.get(credentials.zap_domain)
        return (provider.admitted, provider.refused) if provider is not None else (0, 0)

    def stop(self) -> None:
        """Stop the handler thread (before the Context is terminated)."""
        with self._lock:
            auth, self._auth = self._auth, None
            self._domains.clear()
        if auth is not None:
            auth.stop()

