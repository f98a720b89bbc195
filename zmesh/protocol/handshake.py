"""The connection handshake, sans-IO: `Hello` in, `Welcome` or `Refuse` out.

Where it runs. A process that joins or connects to a mesh (``zmesh node --join``,
``init(address=...)``, ``zmesh status``) says `Hello` to the node first and waits for the
`Welcome` (`zmesh.security.probe`), so a wrong token or another protocol version fails at
once on the joining side, with an error that names it.

Runtime connections carry the same facts without a message of their own: every DEALER's
connection presents the protocol version, its sender name, its public key and the mesh's
vouch for that key as ZMTP metadata, which libzmq sends inside the encrypted CURVE handshake
on every connect and reconnect (`zmesh.security.identity`). The receiving ROUTER checks them
on the first message of each connection, before anything of it is decoded, and refuses a
version mismatch with a warning naming both versions (`zmesh.transports.zmq_peers`). This is
the equivalent of a Hello as the first message of every connection, chosen because a Hello
message could not cover reconnects: libzmq reconnects a DEALER by itself, the new connection
would never say Hello again, while its metadata is sent on every connection; and it costs no
round trip and no bytes per message.

`HandshakeState` is the per-connection state machine for transports that exchange the
messages themselves: until a connection has been welcomed, anything else it sends is
refused. The caller owns the sockets: it feeds received messages in and sends back what it
is told to.
"""

from __future__ import annotations

import hmac
from collections.abc import Hashable, Mapping
from types import MappingProxyType
from typing import Final

import msgspec

from zmesh.errors import HandshakeError
from zmesh.protocol.messages.base import Message
from zmesh.protocol.messages.handshake import Hello, Refuse, Welcome

__all__ = [
    "PROTOCOL_VERSION",
    "ROLES",
    "Peer",
    "HandshakeState",
    "make_hello",
    "check_hello",
    "expect_welcome",
]

PROTOCOL_VERSION: Final[int] = 2
"""Bumped on every incompatible wire change (see zmesh/protocol/SCHEMA.md). 2: a message
whose first frame is empty is an envelope (a batch of messages; `transports.zmq_batch`)."""

ROLES: Final[frozenset[str]] = frozenset({"node", "worker", "driver", "client"})
"""The kinds of process that may say Hello."""


def make_hello(
    *,
    sender: str,
    role: str,
    credential: bytes = b"",
    incarnation: int = 0,
    protocol_version: int = PROTOCOL_VERSION,
) -> Hello:
    """The Hello this process opens a connection with; ValueError/TypeError on bad input."""
    if not isinstance(sender, str) or not sender:
        raise ValueError(f"sender must be a non-empty str, got {sender!r}")
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}: expected one of {', '.join(sorted(ROLES))}")
    if not isinstance(credential, bytes):
        raise TypeError(f"credential must be bytes, got {type(credential).__name__}")
    if type(incarnation) is not int or incarnation < 0:
        raise ValueError(f"incarnation must be an int >= 0, got {incarnation!r}")
    return Hello(
        protocol_version=protocol_version,
        credential=credential,
        sender=sender,
        role=role,
        incarnation=incarnation,
    )


def check_hello(
    hello: Hello,
    *,
    expected_credential: bytes | None,
    node_id: str,
    protocol_version: int = PROTOCOL_VERSION,
) -> Welcome | Refuse:
    """Welcome `hello`, or Refuse it with a reason naming what was expected and what came.

    `expected_credential=None` accepts any credential (a cluster without one). The
    credential is compared in constant time and never echoed back in the reason.
    """
    if hello.protocol_version != protocol_version:
        return Refuse(
            f"protocol version mismatch: expected {protocol_version}, got {hello.protocol_version}"
        )
    if expected_credential is not None and not hmac.compare_digest(
        hello.credential, expected_credential
    ):
        got = (
            "none"
            if not hello.credential
            else f"a different {len(hello.credential)}-byte credential"
        )
        return Refuse(f"credential mismatch: expected the cluster credential, got {got}")
    if hello.role not in ROLES:
        return Refuse(f"unknown role {hello.role!r}: expected one of {', '.join(sorted(ROLES))}")
    if not hello.sender:
        return Refuse("empty sender: expected the sending process's name")
    return Welcome(protocol_version=protocol_version, node_id=node_id)


def expect_welcome(reply: Message, *, protocol_version: int = PROTOCOL_VERSION) -> Welcome:
    """The Welcome answering our Hello; HandshakeError if the peer refused or answered oddly."""
    if isinstance(reply, Refuse):
        raise HandshakeError(f"handshake refused by peer: {reply.reason}")
    if not isinstance(reply, Welcome):
        raise HandshakeError(
            f"expected Welcome or Refuse in answer to Hello, got {type(reply).__name__}"
        )
    if reply.protocol_version != protocol_version:
        raise HandshakeError(
            f"peer {reply.node_id!r} welcomed us with protocol version "
            f"{reply.protocol_version}, expected {protocol_version}"
        )
    return reply


class Peer(msgspec.Struct, frozen=True):
    """A peer whose Hello was accepted."""

    sender: str
    role: str
    incarnation: int
    protocol_version: int


class HandshakeState:
    """The handshake of every connection to one socket, keyed by connection (ROUTER identity).

    `receive` says, for each message, whether to handle it (None) or send back a
    Welcome/Refuse. Refused connections leave no state behind.
    """

    def __init__(
        self,
        *,
        node_id: str,
        expected_credential: bytes | None,
        protocol_version: int = PROTOCOL_VERSION,
    ) -> None:
        if expected_credential is not None and not isinstance(expected_credential, bytes):
            raise TypeError(
                f"expected_credential must be bytes or None, got "
                f"{type(expected_credential).__name__}"
            )
        self.node_id = node_id
        self._credential = expected_credential
        self._version = protocol_version
        self._peers: dict[Hashable, Peer] = {}
        self._incarnations: dict[str, int] = {}  # highest accepted, per sender name
        self.refused = 0

    @property
    def peers(self) -> Mapping[Hashable, Peer]:
        """Accepted connections and who is on the other end (read-only view)."""
        return MappingProxyType(self._peers)

    def peer(self, conn: Hashable) -> Peer | None:
        """The accepted peer on `conn`, or None if it has not completed the handshake."""
        return self._peers.get(conn)

    def forget(self, conn: Hashable) -> None:
        """Drop `conn` (disconnected); its next message must be a Hello again."""
        self._peers.pop(conn, None)

    def receive(self, conn: Hashable, msg: Message) -> Welcome | Refuse | None:
        """Feed one message from `conn`: None means it is accepted, handle it; otherwise send
        back the Welcome or Refuse returned (and do not handle the message)."""
        if not isinstance(msg, Hello):
            if conn in self._peers:
                return None
            self.refused += 1
            return Refuse(f"expected Hello as the first message, got {type(msg).__name__}")
        reply = check_hello(
            msg,
            expected_credential=self._credential,
            node_id=self.node_id,
            protocol_version=self._version,
        )
        latest = self._incarnations.get(msg.sender, -1)
        if isinstance(reply, Welcome) and msg.incarnation < latest:
            reply = Refuse(
                f"stale incarnation of {msg.sender!r}: expected >= {latest}, got {msg.incarnation}"
            )
        if isinstance(reply, Refuse):
            self._peers.pop(conn, None)
            self.refused += 1
            return reply
        if msg.incarnation > latest:
            self._incarnations[msg.sender] = msg.incarnation
            # Connections from older incarnations of this sender belong to a dead process.
            for old, peer in list(self._peers.items()):
                if peer.sender == msg.sender and peer.incarnation < msg.incarnation:
                    del self._peers[old]
        self._peers[conn] = Peer(msg.sender, msg.role, msg.incarnation, msg.protocol_version)
        return reply
