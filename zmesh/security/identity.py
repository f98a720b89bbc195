"""Who a process is on the wire: a CURVE key pair of its own, vouched for by the mesh.

Every process makes a fresh CURVE key pair when it first opens a tcp connection (again after
a fork), and uses it as the client key of all its DEALERs. The cluster key pair (derived from
the join token) stays the server key of every ROUTER, so only holders of the token can
complete a CURVE handshake with a member at all; the process's own key is what the peer then
knows it as. libzmq sends the connection's ZMTP metadata inside the encrypted CURVE handshake
on every (re)connect, and a DEALER puts three properties there:

- ``X-Zmesh-Proto``: the wire protocol version (`zmesh.protocol.handshake.PROTOCOL_VERSION`);
- ``X-Zmesh-Sender``: the address the process receives on, which is how it is named;
- ``X-Zmesh-Key``: its public key (on tcp the CURVE handshake proves it; on ipc, which only
  the same user can reach, it is believed), so one process has one identity on both;
- ``X-Zmesh-Vouch``: an HMAC of its public key under a key derived from the mesh secret, so a
  key that completed the handshake is also one a member made for this mesh.

The receiving ROUTER (`zmesh.transports.zmq_peers`) checks these once per connection and
binds each sender name to the key that first claimed it, so no member can speak for another.
"""

from __future__ import annotations

import hmac
import os
import threading
from dataclasses import dataclass, field

import zmq
from zmq.utils import z85

from zmesh.security.keys import ClusterCredentials, derive

__all__ = [
    "KEY_PROPERTY",
    "PROTO_PROPERTY",
    "SENDER_PROPERTY",
    "VOUCH_PROPERTY",
    "ProcessKeys",
    "check_vouch",
    "client_metadata",
    "process_keys",
    "vouch",
]

KEY_PROPERTY = "X-Zmesh-Key"
PROTO_PROPERTY = "X-Zmesh-Proto"
SENDER_PROPERTY = "X-Zmesh-Sender"
VOUCH_PROPERTY = "X-Zmesh-Vouch"


@dataclass(frozen=True)
class ProcessKeys:
    """This process's CURVE key pair (Z85, 40 bytes each)."""

    public: bytes
    secret: bytes = field(repr=False)

    @classmethod
    def generate(cls) -> ProcessKeys:
        public, secret = zmq.curve_keypair()
        return cls(public, secret)


_lock = threading.Lock()
_keys: ProcessKeys | None = None
_keys_pid = 0
_vouches: dict[tuple[bytes, bytes], str] = {}


def process_keys() -> ProcessKeys:
    """This process's key pair, made at first use; a forked child makes its own."""
    global _keys, _keys_pid
    with _lock:
        if _keys is None or _keys_pid != os.getpid():
            _keys, _keys_pid = ProcessKeys.generate(), os.getpid()
            _vouches.clear()
        return _keys


def vouch(credentials: ClusterCredentials, public: bytes) -> str:
    """The mesh's vouch for a Z85 public key: a hex HMAC only token holders can make."""
    cache_key = (credentials.secret, public)
    found = _vouches.get(cache_key)
    if found is None:
        mac = hmac.new(derive(credentials.secret, b"zmesh-vouch-key"), z85.decode(public),
                       "blake2b").hexdigest()
        found = _vouches.setdefault(cache_key, mac)
    return found


def check_vouch(credentials: ClusterCredentials, public: str, presented: str) -> bool:
    """True when `presented` is the mesh's vouch for the Z85 key `public` (constant time)."""
    try:
        expected = vouch(credentials, public.encode())
    except (ValueError, UnicodeEncodeError):
        return False
    return hmac.compare_digest(expected.encode(), presented.encode(errors="replace"))


def client_metadata(credentials: ClusterCredentials | None, sender: str) -> list[bytes]:
    """The ZMTP metadata (``ZMQ_METADATA`` values) a DEALER presents, naming `sender`."""
    from zmesh.protocol.handshake import PROTOCOL_VERSION

    props = [f"{PROTO_PROPERTY}:{PROTOCOL_VERSION}".encode(),
             f"{SENDER_PROPERTY}:{sender}".encode()]
    if credentials is not None:
        public = process_keys().public
        props.append(f"{KEY_PROPERTY}:{public.decode()}".encode())
        props.append(f"{VOUCH_PROPERTY}:{vouch(credentials, public)}".encode())
    return props
