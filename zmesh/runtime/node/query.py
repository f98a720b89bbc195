"""Asking a node for its state from outside the runtime: `zmesh status`, `Cluster`, tests.

A `NodeQuerier` holds one endpoint of its own and sends `Query` messages to any node's
tcp or ipc address; it is not a driver (it registers nothing and owns nothing).
"""

from __future__ import annotations

import itertools
import time
from typing import Any

import msgspec

from zmesh.errors import ZmeshError
from zmesh.protocol import codec
from zmesh.protocol.messages import runtime as m
from zmesh.runtime.addresses import LOOPBACK_BIND, bind_to_reach
from zmesh.security import keys
from zmesh.security.keys import ClusterCredentials
from zmesh.transports import Endpoint, open_endpoint


class NodeQuerier:
    """A small synchronous client for node queries (one thread at a time)."""

    def __init__(self, bind: str | None = None,
                 credentials: ClusterCredentials | None = None) -> None:
        self._bind = bind
        self._credentials = credentials
        self._endpoint: Endpoint | None = None
        self._ids = itertools.count(1)

    def _endpoint_for(self, address: str) -> Endpoint:
        # Opened at the first query, so that without credentials of its own the querier can
        # use those of the node it asks (one started on this machine by this user).
        if self._endpoint is None:
            creds = self._credentials or keys.installed()
            if creds is None:
                from zmesh.runtime.node.credentials import local_credentials

                creds = local_credentials([address])
            # (bound where the node can answer: see zmesh.runtime.addresses)
            self._endpoint = open_endpoint(self._bind or bind_to_reach(address),
                                           credentials=creds)
        return self._endpoint

    @property
    def endpoint(self) -> Endpoint:
        """The querier's endpoint (opened with this process's credentials if not yet open)."""
        if self._endpoint is None:
            self._endpoint = open_endpoint(self._bind or LOOPBACK_BIND,
                                           credentials=self._credentials)
        return self._endpoint

    def query(self, address: str, what: str, arg: bytes = b"", timeout: float = 5.0) -> Any:
        """The node's decoded answer to `what`; ZmeshError if it errs or does not answer."""
        if not address.startswith(("tcp://", "ipc://")):
            address = f"tcp://{address}"
        rid = next(self._ids)
        endpoint = self._endpoint_for(address)
        endpoint.send(address, [codec.encode(m.Query(request_id=rid, what=what, arg=arg))])
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ZmeshError(f"no answer from the zmesh node at {address} within "
                                 f"{timeout:g}s to a {what!r} query")
            item = endpoint.recv(left)
            if item is None:
                continue
            unpacked = codec.safe_unpack(item[1], sender=item[0])
            if unpacked is None:
                continue
            reply = unpacked[0]
            if not isinstance(reply, m.QueryReply) or reply.request_id != rid:
                continue  # a late answer to an earlier query that timed out
            if reply.error:
                raise ZmeshError(f"node at {address}: {reply.error}")
            return msgspec.msgpack.decode(reply.data)

    def close(self) -> None:
        if self._endpoint is not None:
            self._endpoint.close()

    def __enter__(self) -> NodeQuerier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def query_node(address: str, what: str, arg: bytes = b"", timeout: float = 5.0) -> Any:
    """One query to one node, with a short-lived endpoint."""
    with NodeQuerier() as q:
        return q.query(address, what, arg, timeout)


