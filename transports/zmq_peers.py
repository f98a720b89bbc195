"""Who is on the other end of each inbound connection of a ROUTER, checked once per connection.

A ROUTER gives every connection a routing id of its own (zmesh DEALERs choose none on tcp and
ipc), and this table maps it to the name of the process on the other end, so the hot path
costs one dict lookup per message. The first message of a connection it does not know yet is
checked against the connection's ZMTP metadata (sent by libzmq inside the CURVE handshake on
every connect and reconnect; see `zmesh.security.identity`):

- the wire protocol version must be ours (else the message is dropped, and a warning names
  both versions);
- over CURVE, the client key (the ZAP User-Id) must be the key the metadata names and carry
  the mesh's vouch for the sender name it claims (`zmesh.security.identity.vouch`): a key
  vouched for one name is refused under any other (`refused_unvouched`), whether that name's
  process is connected now, idle, or never connected; over ipc (same user only) the key the
  metadata names is believed;
- the sender name is bound to the first key that claimed it: another key claiming a name
  whose holder is still connected is refused and counted (`refused_spoof`). A name whose
  holder is gone (its last connection closed: a port reused by a new process, with a vouch
  of its own for that address) passes to the new key.

Connections without a key (an insecure mesh) are named by their metadata alone; inproc, which
has no metadata, by its routing id.

A monitor of the ROUTER reports each tcp/ipc connection that closes, by its fd (pyzmq's
libzmq has no ``ZMQ_ROUTER_NOTIFY``, a draft option), and `reap` (run before each new
connection is named, and by `ZmqEndpoint.close_idle`) forgets it: the table holds the
connections that are open, and a name whose last connection closed is free again. libzmq
reports a close before it closes the fd, so a reused fd's old entry is gone before its new
connection is named.
"""

from __future__ import annotations

import itertools
import logging
import struct
from collections import OrderedDict

import zmq

from zmesh.protocol.codec import DropWarnings
from zmesh.protocol.handshake import PROTOCOL_VERSION
from zmesh.security.identity import (
    KEY_PROPERTY,
    PROTO_PROPERTY,
    SENDER_PROPERTY,
    VOUCH_PROPERTY,
    check_vouch,
)
from zmesh.security.keys import ClusterCredentials

from .zmq_context import INPROC_MARK

__all__ = ["PeerTable"]

logger = logging.getLogger("zmesh.transports.peers")
_PROTO = str(PROTOCOL_VERSION)
_MAX_NAME = 1024
_KEY_CHARS = 40  # a Z85 CURVE public key
_monitors = itertools.count()
_MONITOR_EVENT = struct.Struct("=Hi")


def _prop(frame: zmq.Frame, name: str) -> str | None:
    try:
        value = frame.get(name)
    except (zmq.ZMQError, UnicodeDecodeError):
        return None
    return value if isinstance(value, str) else None


class PeerTable:
    """Inbound connections (routing id -> sender name) and sender names -> the key holding them."""

    def __init__(self, router: zmq.Socket[bytes], credentials: ClusterCredentials | None,
                 max_connections: int = 4096, max_names: int = 65536) -> None:
        self._router = router
        self._credentials = credentials
        self._max_connections = max_connections
        self._max_names = max_names
        self.connections: dict[bytes, str] = {}
        """Routing id -> sender, for connections already checked (the hot path reads it)."""
        self._claims: OrderedDict[str, tuple[str, bytes]] = OrderedDict()  # name -> (key, rid)
        self._replies: OrderedDict[str, bytes] = OrderedDict()  # name -> its latest routing id
        self._live: dict[str, int] = {}  # name -> its connections in `connections`
        self._fds: dict[int, bytes] = {}  # the fd of each tcp/ipc connection -> its routing id
        self._monitor: zmq.Socket[bytes] | None = self._open_monitor(router)
        self._vouched: OrderedDict[tuple[str, str], bool] = OrderedDict()  # (key, name)
        self._warnings = DropWarnings(logger)
        self.dropped_unnamed = 0
        """Messages dropped because their connection names no sender (not a zmesh peer)."""
        self.refused_version = 0
        """Messages dropped because their peer speaks another protocol version."""
        self.refused_unvouched = 0
        """Messages dropped because their CURVE key carries no valid vouch of this mesh."""
        self.refused_spoof = 0
        """Messages dropped because their key claimed a name another live key holds."""
        self.disconnects = 0
        """Connections the ROUTER reported closed."""

    def resolve(self, rid: bytes, frame: zmq.Frame) -> str | None:
        """Name the sender of a message from a connection not seen before; None: drop it."""
        if self._fds:
            self.reap()
        sender = _prop(frame, SENDER_PROPERTY)
        if sender is None:
            return self._unmetered(rid, frame)
        if not sender or len(sender) > _MAX_NAME or "://" not in sender:
            self.dropped_unnamed += 1
            return None
        proto = _prop(frame, PROTO_PROPERTY)
        if proto != _PROTO:
            self.refused_version += 1
            self._warnings.warn(
                "refused %s: it speaks zmesh wire protocol %s, this process speaks %s; run "
                "the same zmesh version on every member", sender, proto or "(none)", _PROTO)
            return None
        creds = self._credentials
        if creds is not None:
            key = _prop(frame, KEY_PROPERTY)
            curve = _prop(frame, "User-Id")
            proven = curve is not None and len(curve) == _KEY_CHARS  # tcp: CURVE proved it
            if proven and (curve != key or not self._is_vouched(creds, key, sender, frame)):
                self.refused_unvouched += 1
                self._warnings.warn("refused %s: its key carries no vouch of this mesh for "
                                    "that name (a zmesh process with another token, or one "
                                    "claiming another process's name?)", sender)
                return None
            if key is not None and not self._claim(sender, key, rid):
                return None
        self._remember(rid, sender)
        try:
            self._fds[int(frame.get(zmq.SRCFD))] = rid
        except (zmq.ZMQError, TypeError, ValueError):
            pass
        return sender

    def reap(self) -> int:
        """Forget the connections the ROUTER reported closed since the last call; how many."""
        monitor = self._monitor
        reaped = 0
        while monitor is not None:
            try:
                frames = monitor.recv_multipart(zmq.NOBLOCK)
            except zmq.ZMQError:
                break  # none left (or the context is going)
            # libzmq's monitor event: a 16-bit event id and a 32-bit value (here the fd),
            # then the endpoint (parsed here: zmq.utils.monitor imports zmq.asyncio)
            if len(frames) != 2 or len(frames[0]) != 6:
                continue
            event, fd = _MONITOR_EVENT.unpack(frames[0])
            if event != zmq.EVENT_DISCONNECTED:
                continue
            reaped += 1
            rid = self._fds.pop(fd, None)
            sender = self.connections.pop(rid, None) if rid is not None else None
            if rid is not None and sender is not None:
                self._forget(rid, sender, gone=True)
        self.disconnects += reaped
        return reaped

    @staticmethod
    def _open_monitor(router: zmq.Socket[bytes]) -> zmq.Socket[bytes]:
        # libzmq's I/O thread sends each event blocking: with a bounded queue, 1,000 closes
        # between two reaps (strangers that never get named) would stall it, and the node.
        # Unbounded (rcvhwm 0), the queue holds a few dozen bytes per close until a reap.
        address = f"inproc://zmesh-monitor-{id(router):x}-{next(_monitors)}"
        router.monitor(address, zmq.EVENT_DISCONNECTED)
        monitor = router.context.socket(zmq.PAIR)
        monitor.rcvhwm = 0
        monitor.linger = 0
        monitor.connect(address)
        return monitor

    def close(self) -> None:
        """Stop the monitor (before the ROUTER closes)."""
        monitor, self._monitor = self._monitor, None
        if monitor is not None:
            try:
                self._router.disable_monitor()
            except zmq.ZMQError:
                pass
            monitor.close(linger=0)

    def sizes(self) -> dict[str, int]:
        """How many entries each table holds (all bounded by the connections open)."""
        return {"connections": len(self.connections), "names": len(self._claims),
                "replies": len(self._replies), "live_names": len(self._live),
                "vouched": len(self._vouched)}

    def counts(self) -> dict[str, int]:
        """The refusal counters, for a node's metrics."""
        return {"unnamed": self.dropped_unnamed, "version": self.refused_version,
                "unvouched": self.refused_unvouched, "spoof": self.refused_spoof}

    def reply_id(self, sender: str) -> bytes | None:
        """The routing id of `sender`'s latest connection (to answer on it), if known."""
        return self._replies.get(sender)

    # -- checks ---------------------------------------------------------------------------

    def _unmetered(self, rid: bytes, frame: zmq.Frame) -> str | None:
        """A connection without zmesh metadata: inproc (named by its routing id), else not ours."""
        try:
            frame.get("Socket-Type")
        except zmq.ZMQError:
            # No metadata at all: an inproc pipe, inside this process.
            try:
                sender = rid.decode().rpartition(INPROC_MARK)[0]
            except UnicodeDecodeError:
                sender = ""
            if "://" in sender:
                self._remember(rid, sender)
                return sender
        self.dropped_unnamed += 1
        return None

    def _is_vouched(self, creds: ClusterCredentials, key: str, sender: str,
                    frame: zmq.Frame) -> bool:
        if self._vouched.get((key, sender)):
            return True
        presented = _prop(frame, VOUCH_PROPERTY)
        if presented is None or not check_vouch(creds, key, sender, presented):
            return False
        self._vouched[(key, sender)] = True
        if len(self._vouched) > self._max_names:
            self._vouched.popitem(last=False)
        return True

    def _claim(self, sender: str, key: str, rid: bytes) -> bool:
        held = self._claims.get(sender)
        if held is not None and held[0] != key and (self._live.get(sender, 0) > 0
                                                     or self._alive(held[1])):
            self.refused_spoof += 1
            self._warnings.warn(
                "refused a connection claiming to be %s: that name belongs to another "
                "process (key %s..., still connected); this one authenticated as %s...",
                sender, held[0][:8], key[:8])
            return False
        self._claims[sender] = (key, rid)
        self._claims.move_to_end(sender)
        if len(self._claims) > self._max_names:
            self._claims.popitem(last=False)
        return True

    def _alive(self, rid: bytes) -> bool:
        """Whether the connection `rid` is still up (ROUTER_MANDATORY refuses a gone one);
        the empty message it then gets is never read by a zmesh DEALER."""
        try:
            self._router.send_multipart([rid, b""], zmq.NOBLOCK)
        except zmq.Again:
            return True  # up, its queue full
        except zmq.ZMQError:
            return False
        return True

    def _remember(self, rid: bytes, sender: str) -> None:
        conns = self.connections
        conns[rid] = sender
        self._live[sender] = self._live.get(sender, 0) + 1
        if len(conns) > self._max_connections:
            # Oldest first; a live connection dropped here is simply checked again (its name
            # stays claimed: `_alive` still finds it up).
            old = next(iter(conns))
            self._forget(old, conns.pop(old), gone=False)
        self._replies[sender] = rid
        self._replies.move_to_end(sender)
        if len(self._replies) > self._max_connections:
            self._replies.popitem(last=False)

    def _forget(self, rid: bytes, sender: str, *, gone: bool) -> None:
        """`rid` (one of `sender`'s connections) left the table; `gone`: it closed."""
        left = self._live.get(sender, 0) - 1
        if left > 0:
            self._live[sender] = left
            if self._replies.get(sender) == rid:
                # Answer on the newest of its connections still open, not the closed one
                # (a scan, but only when a name's latest connection of several closes).
                newest = next((r for r, s in reversed(self.connections.items())
                               if s == sender), None)
                if newest is None:
                    del self._replies[sender]
                else:
                    self._replies[sender] = newest
            return
        self._live.pop(sender, None)
        if self._replies.get(sender) == rid:
            del self._replies[sender]
        if gone:  # its last connection closed: the name is free
            held = self._claims.pop(sender, None)
            if held is not None:
                self._vouched.pop((held[0], sender), None)
