"""Who a process is on the wire: a CURVE key pair of its own, vouched for by the mesh.

Every process makes a fresh CURVE key pair when it first opens a tcp connection (again after
a fork), and uses it as the client key of all its DEALERs. The cluster key pair (derived from
the join token) stays the server key of every ROUTER, so only holders of the token can
complete a CURVE handshake with a member at all; the process's own key is what the peer then
knows it as. libzmq sends the connection's ZMTP metadata inside the encrypted CURVE handshake
on every (re)connect, and a DEALER puts four properties there:

- ``X-Zmesh-Proto``: the wire protocol version (`zmesh.protocol.handshake.PROTOCOL_VERSION`);
- ``X-Zmesh-Sender``: the address the process receives on, which is how it is named;
- ``X-Zmesh-Key``: its public key (on tcp the CURVE handshake proves it; on ipc, which only
  the same user can reach, it is believed), so one process has one identity on both;
- ``X-Zmesh-Vouch``: an HMAC of its sender name and public key under a key derived from the
  mesh secret, so a key that completed the handshake is also one a member made for this mesh,
  and made to speak as that one name only;
- ``X-Zmesh-Proof``, on a connection that only carries a proof-of-address challenge.

The receiving ROUTER (`zmesh.transports.zmq_peers`) checks these once per connection. A
vouch shows that a key is a member's, made for one name: a key vouched for one name is
refused under any other. It cannot show more, because every process of a mesh holds the
secret (workers inherit the token from their node) and so can mint a vouch for any name.
What settles who a tcp sender is, is its address: a ROUTER that hears a key claim a name for
the first time asks the process that receives at that address for its key, and delivers
nothing of the claim until that key is the claimant's (`zmesh.transports.zmq_proof`).
Claims over ipc are believed: only the same user can reach those sockets.
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
    "PROOF_PROPERTY",
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
PROOF_PROPERTY = "X-Zmesh-Proof"
"""Marks a connection that only carries a proof-of-address challenge (`transports.zmq_proof`)."""


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
