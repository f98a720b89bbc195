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
- ``X-Zmesh-Vouch``: an HMAC of its sender name and public key under a key derived from the
  mesh secret, so a key that completed the handshake is also one a member made for this mesh,
  and made to speak as that one name only.

The receiving ROUTER (`zmesh.transports.zmq_peers`) checks these once per connection and
binds each sender name to the key that first claimed it, so no member can speak for another:
a key vouched for one name is refused under any other, whether or not that name's process is
connected at the moment (idle, or never connected yet). A process that reuses the address of
one that exited makes its own vouch for it, and takes the name once the old holder's
connections are closed.

What a vouch cannot stop is a process that holds the mesh secret itself and mints a vouch for
another process's name: every process of a mesh today holds the secret (workers inherit the
token from their node), so the binding guards against keys issued for other names, not
against a member that deliberately forges (see the closing note of issue 7).
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
_vouches: dict[tuple[bytes, bytes, str], str] = {}
_MAX_CACHED = 4096


def process_keys() -> ProcessKeys:
    """This process's key pair, made at first use; a forked child makes its own."""
    global _keys, _keys_pid
    with _lock:
        if _keys is None or _keys_pid != os.getpid():
            _keys, _keys_pid = ProcessKeys.generate(), os.getpid()
            _vouches.clear()
        return _keys


def vouch(credentials: ClusterCredentials, public: bytes, sender: str) -> str:
    """The mesh's vouch that the Z85 public key `public` speaks as `sender`: a hex HMAC only
    token holders can make, valid for that one name."""
    cache_key = (credentials.secret, public, sender)
    found = _vouches.get(cache_key)
    if found is None:
        # The key is fixed-size (32 bytes), so name and key cannot be shifted into each other.
        mac = hmac.new(derive(credentials.secret, b"zmesh-vouch-name"),
                       z85.decode(public) + sender.encode(), "blake2b").hexdigest()
        if len(_vouches) >= _MAX_CACHED:
            _vouches.clear()
        found = _vouches.setdefault(cache_key, mac)
    return found


def check_vouch(credentials: ClusterCredentials, public: str, sender: str,
                presented: str) -> bool:
    """True when `presented` is the mesh's vouch that the Z85 key `public` speaks as `sender`
    (constant time)."""
    try:
        raw = public.encode()
        if len(raw) != 40:
            return False
        expected = vouch(credentials, raw, sender)
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
        props.append(f"{VOUCH_PROPERTY}:{vouch(credentials, public, sender)}".encode())
    return props
