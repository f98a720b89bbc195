"""Checking a mesh's door before going in: CURVE, ZAP and the versioned `Hello` handshake.

A process that joins or connects to a mesh (``zmesh node --join``, ``init(address=...)``,
``zmesh status``) first calls `handshake`: a short-lived DEALER watched by a socket monitor
sends `Hello` and waits for `Welcome`. A wrong token shows at once as a failed CURVE/ZAP
handshake (or a `Refuse`), and becomes an `AuthenticationError` that says so, instead of
messages that silently never arrive.
"""

from __future__ import annotations

import secrets
import struct
import time

import zmq

from zmesh.errors import AuthenticationError, HandshakeError, ZmeshError
from zmesh.protocol import codec
from zmesh.protocol.handshake import PROTOCOL_VERSION, expect_welcome, make_hello
from zmesh.protocol.messages.handshake import Welcome
from zmesh.security.keys import ClusterCredentials

__all__ = ["PROBE_PREFIX", "handshake"]

PROBE_PREFIX = "probe://"
"""Sender names of probes: a node answers them on the connection they came in on."""

_FAILED = (zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
           | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)
_MONITOR_EVENT = struct.Struct("=Hi")
_WATCH = _FAILED | zmq.EVENT_DISCONNECTED | zmq.EVENT_HANDSHAKE_SUCCEEDED


def handshake(address: str, credentials: ClusterCredentials | None, *, role: str = "client",
              timeout: float = 10.0) -> Welcome:
    """Say Hello to the node at `address` (tcp:// or ipc://) and return its Welcome.

    AuthenticationError when the node refuses our credentials (a wrong token, or a mesh
    with/without authentication where we are the other way round), HandshakeError for a
    protocol version mismatch, ZmeshError when nothing answers within `timeout` seconds.
    """
    from zmesh.transports.zmq_context import prepare_dealer, shared_context

    context = shared_context.acquire()
    ident = f"{PROBE_PREFIX}{secrets.token_hex(8)}"
    dealer = context.socket(zmq.DEALER)
    monitor: zmq.Socket[bytes] | None = None
    try:
        dealer.linger = 0
        curve = credentials is not None and address.startswith("tcp://")
        prepare_dealer(dealer, address, credentials, ident)
        monitor = dealer.get_monitor_socket(_WATCH)
        try:
            dealer.connect(address)
        except zmq.ZMQError as exc:
            raise ZmeshError(f"cannot connect to the zmesh node at {address}: {exc}") from None
        proof = credentials.proof() if credentials is not None else b""
        dealer.send(codec.encode(make_hello(sender=ident, role=role, credential=proof)))
        return _await_welcome(address, dealer, monitor, curve, timeout)
    finally:
        if monitor is not None:
            dealer.disable_monitor()
            monitor.close(linger=0)
        dealer.close(linger=0)
        shared_context.release()


def _await_welcome(address: str, dealer: zmq.Socket[bytes], monitor: zmq.Socket[bytes],
                   curve: bool, timeout: float) -> Welcome:
    poller = zmq.Poller()
    poller.register(dealer, zmq.POLLIN)
    poller.register(monitor, zmq.POLLIN)
    deadline = time.monotonic() + timeout
    drops = 0
    connected = False  # the connection's own handshake (ZMTP, CURVE) succeeded
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            if connected:
                # Someone there took the connection but dropped our Hello: a zmesh process
                # of another wire version (before its versions answered probes with a
                # Refuse naming both), or one too busy to answer.
                raise ZmeshError(
                    f"the zmesh node at {address} took our connection but did not answer our "
                    f"Hello within {timeout:g}s: it may run another zmesh version (this "
                    f"process speaks wire protocol {PROTOCOL_VERSION}; its log names the "
                    "version it refused), or it is overloaded")
            raise ZmeshError(f"no answer from a zmesh node at {address} within {timeout:g}s: "
                             "is one running there, and is the port reachable?")
        ready = dict(poller.poll(max(1, int(left * 1000))))
        if monitor in ready:
            event = _monitor_event(monitor.recv_multipart())
            connected = connected or event == zmq.EVENT_HANDSHAKE_SUCCEEDED
            if event & _FAILED or (event == zmq.EVENT_DISCONNECTED and (drops := drops + 1) > 1):
                raise AuthenticationError(_refused(address, curve, event))
        if dealer in ready:
            frame = dealer.recv()
            if not frame:
                continue  # a liveness check of the node's (zmq_peers), not an answer
            reply = codec.unpack([frame])[0]
            try:
                return expect_welcome(reply)
            except HandshakeError as exc:
                if "credential" in str(exc):
                    raise AuthenticationError(
                        f"the zmesh node at {address} refused our join token: {exc}") from None
                raise


def _monitor_event(frames: list[bytes]) -> int:
    """The event id of a socket monitor's message (a 16-bit id and a 32-bit value, then the
    endpoint). Parsed here: zmq.utils.monitor imports zmq.asyncio, hence asyncio and ssl,
    into every node that checks its seeds."""
    if len(frames) != 2 or len(frames[0]) != 6:
        raise ZmeshError(f"a malformed socket monitor message: {frames!r}")
    return int(_MONITOR_EVENT.unpack(frames[0])[0])


def _refused(address: str, curve: bool, event: int) -> str:
    if not curve:
        return (f"the zmesh node at {address} dropped our plain (insecure) connection: it "
                "requires authentication; pass its join token instead of --insecure")
    if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
        why = "it does not admit our key: the join token is wrong (it is another mesh's)"
    else:
        why = ("the encrypted handshake failed: the join token is wrong, or the node runs "
               "--insecure, or it is not a zmesh node")
    return (f"authentication with the zmesh node at {address} failed: {why}. Pass the token "
            "that the mesh's first node printed (--token, ZMESH_TOKEN, or init(token=...)).")
