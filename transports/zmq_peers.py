"""Who is on the other end of each inbound connection of a ROUTER, checked once per connection.

A ROUTER gives every connection a routing id of its own (zmesh DEALERs choose none on tcp and
ipc), and this table maps it to the name of the process on the other end, so the hot path
costs one dict lookup per message. The first message of a connection it does not know yet is
checked against the connection's ZMTP metadata (sent by libzmq inside the CURVE handshake on
every connect and reconnect; see `zmesh.security.identity`):

- the wire protocol version must be ours (else the message is dropped, and a warning names
  both versions; a handshake probe is also answered with a `Refuse` naming both, so a driver
  or node of another version that says Hello fails at once instead of waiting for an answer);
- over CURVE, the client key (the ZAP User-Id) must be the key the metadata names and carry
  the mesh's vouch for the sender name it claims (`zmesh.security.identity.vouch`): a key
  vouched for one name is refused under any other (`refused_unvouched`);
- over CURVE, the key must also own the name: the process that receives at that address must
  say it has that key (`transports.zmq_proof`). Until it has, the connection's messages are
  held; a claim the address denies is refused (`refused_spoof`), one nobody answers for is
  dropped (`refused_unproven`). Proven owners are remembered (bounded LRU), so a process
  proves a name once to each peer; a new process at the same address proves it again and
  takes it. This process's own key, and this process's own addresses, need no asking;
- over ipc (same user only) the key the metadata names is believed, and the sender name is
  bound to the first key that claimed it while that key's connections are open: another key
  claiming a name whose holder is still connected is refused and counted (`refused_spoof`).
  So are probes (``probe://`` names: they bind no address to prove).

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
import time
from collections import OrderedDict
from collections.abc import Callable, Collection

import zmq

from zmesh.protocol.codec import DropWarnings, encode
from zmesh.protocol.handshake import PROTOCOL_VERSION
from zmesh.protocol.messages.handshake import Refuse
from zmesh.security.identity import (
    KEY_PROPERTY,
    PROOF_PROPERTY,
    PROTO_PROPERTY,
    SENDER_PROPERTY,
    VOUCH_PROPERTY,
    check_vouch,
    process_keys,
)
from zmesh.security.keys import ClusterCredentials
from zmesh.security.probe import PROBE_PREFIX

from . import zmq_batch
from .base import Buffer
from .zmq_context import INPROC_MARK
from .zmq_proof import DEFAULT_TIMEOUT, AddressProofs, Claim

__all__ = ["PeerTable"]

logger = logging.getLogger("zmesh.transports.peers")
_PROTO = str(PROTOCOL_VERSION)
_MAX_NAME = 1024
_KEY_CHARS = 40  # a Z85 CURVE public key
_monitors = itertools.count()
_MONITOR_EVENT = struct.Struct("=Hi")
_PROVABLE = ("tcp://", "ipc://")  # names a process receives at, so it can be asked there
_BACKOFF_S = 2.0  # a key refused for a name is refused without asking again for this long


def _prop(frame: zmq.Frame, name: str) -> str | None:
    try:
        value = frame.get(name)
    except (zmq.ZMQError, UnicodeDecodeError):
        return None
    return value if isinstance(value, str) else None


def _whose(owner: str | None) -> str:
    return f"key {owner[:8]}..." if owner else "another process"


class PeerTable:
    """Inbound connections (routing id -> sender name) and sender names -> the key holding them."""

    def __init__(self, router: zmq.Socket[bytes], credentials: ClusterCredentials | None,
                 max_connections: int = 4096, max_names: int = 65536, *,
                 own_addresses: Callable[[], Collection[str]] = tuple,
                 proof_timeout: float = DEFAULT_TIMEOUT) -> None:
        self._router = router
        self._credentials = credentials
        self._max_connections = max_connections
        self._max_names = max_names
        self._own_addresses = own_addresses
        self.connections: dict[bytes, str] = {}
        """Routing id -> sender, for connections already checked (the hot path reads it)."""
        self._claims: OrderedDict[str, tuple[str, bytes]] = OrderedDict()  # name -> (key, rid)
        self._owners: OrderedDict[str, str] = OrderedDict()  # name -> key proven to receive at it
        self._refused: OrderedDict[tuple[str, str], float] = OrderedDict()  # (key, name) -> until
        self._replies: OrderedDict[str, bytes] = OrderedDict()  # name -> its latest routing id
        self._live: dict[str, int] = {}  # name -> its connections in `connections`
        self._fds: dict[int, bytes] = {}  # the fd of each tcp/ipc connection -> its routing id
        self._monitor: zmq.Socket[bytes] | None = self._open_monitor(router)
        self._vouched: OrderedDict[tuple[str, str], bool] = OrderedDict()  # (key, name)
        self._warnings = DropWarnings(logger)
        self.proofs = AddressProofs(router.context, credentials, self._settled,
                                    timeout=proof_timeout)
        """Proof-of-address challenges in flight, and the messages held for them."""
        self.dropped_unnamed = 0
        """Messages dropped because their connection names no sender (not a zmesh peer)."""
        self.refused_version = 0
        """Messages dropped because their peer speaks another protocol version."""
        self.refused_unvouched = 0
        """Messages dropped because their CURVE key carries no valid vouch of this mesh."""
        self.refused_spoof = 0
        """Messages dropped because their key claimed a name another key holds."""
        self.refused_unproven = 0
        """Messages dropped because nobody at the address they claim answered for their key."""
        self.disconnects = 0
        """Connections the ROUTER reported closed."""

    @property
    def address(self) -> str:
        """The name this ROUTER's owner sends as (its challenges carry it)."""
        return self.proofs.address

    @address.setter
    def address(self, value: str) -> None:
        self.proofs.address = value

    def resolve(self, rid: bytes, frame: zmq.Frame, frames: list[Buffer]) -> str | None:
        """Name the sender of a message (`frames`, first frame `frame`) from a connection not
        seen before; None: it was dropped, or is held until its sender is proven."""
        if self._fds:
            self.reap()
        n = zmq_batch.count(frames)  # every message of a batch counts, held or refused
        sender = _prop(frame, SENDER_PROPERTY)
        if sender is None:
            return self._unmetered(rid, frame, n)
        if not sender or len(sender) > _MAX_NAME or "://" not in sender:
            self.dropped_unnamed += n
            return None
        proto = _prop(frame, PROTO_PROPERTY)
        if proto != _PROTO:
            self.refused_version += n
            self._warnings.warn(
                "refused %s: it speaks zmesh wire protocol %s, this process speaks %s; run "
                "the same zmesh version on every member", sender, proto or "(none)", _PROTO)
            if sender.startswith(PROBE_PREFIX) and n == 1:
                self._refuse_probe(rid, proto or "(none)")
            return None
        creds = self._credentials
        challenge = _prop(frame, PROOF_PROPERTY) is not None
        if creds is None:
            if challenge:  # (an insecure mesh proves nothing)
                self.dropped_unnamed += n
                return None
        else:
            key = _prop(frame, KEY_PROPERTY)
            curve = _prop(frame, "User-Id")
            proven = curve is not None and len(curve) == _KEY_CHARS  # tcp: CURVE proved it
            if proven and (key is None or curve != key or not self._is_vouched(creds, key, sender, frame)):
                self.refused_unvouched += n
                self._warnings.warn("refused %s: its key carries no vouch of this mesh for "
                                    "that name (a zmesh process with another token, or one "
                                    "claiming another process's name?)", sender)
                return None
            if challenge:  # another process asks who receives here: never a message
                self.proofs.answer(self._router, rid, frames)
                return None
            if proven and curve is not None:
                if not self._admit(rid, sender, curve, frame, frames, n):
                    return None
            elif key is not None and not self._claim(sender, key, rid, n):
                return None
        self._remember(rid, sender)
        self._track_fd(rid, frame)
        return sender

    def _track_fd(self, rid: bytes, frame: zmq.Frame) -> None:
        try:
            self._fds[int(frame.get(zmq.SRCFD))] = rid
        except (zmq.ZMQError, TypeError, ValueError):
            pass

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
            if rid is None:
                continue
            sender = self.connections.pop(rid, None)
            if sender is not None:
                self._forget(rid, sender, gone=True)
            else:
                self.proofs.discard(rid)  # a connection whose claim is still being proven
        self.disconnects += reaped
        return reaped

    @staticmethod
    def _open_monitor(router: zmq.Socket[bytes]) -> zmq.Socket[bytes]:
        # libzmq's I/O thread sends each event blocking: with a bounded queue, 1,000 closes
        # between two reaps (strangers that never get named) would stall it, and the node.
        # Unbounded (rcvhwm 0), the queue holds a few dozen bytes per close until a reap.
        address = f"inproc://zmesh-monitor-{id(router):x}-{next(_monitors)}"
        router.monitor(address, zmq.EVENT_DISCONNECTED)
        monitor: zmq.Socket[bytes] = router.context.socket(zmq.PAIR)
        monitor.rcvhwm = 0
        monitor.linger = 0
        monitor.connect(address)
        return monitor

    def close(self) -> None:
        """Stop the challenges and the monitor (before the ROUTER closes)."""
        self.proofs.close()
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
                "vouched": len(self._vouched), "owners": len(self._owners),
                "refused": len(self._refused), **self.proofs.sizes()}

    def counts(self) -> dict[str, int]:
        """The refusal counters, for a node's metrics."""
        return {"unnamed": self.dropped_unnamed, "version": self.refused_version,
                "unvouched": self.refused_unvouched, "spoof": self.refused_spoof,
                "unproven": self.refused_unproven, "overflow": self.proofs.overflow}

    def reply_id(self, sender: str) -> bytes | None:
        """The routing id of `sender`'s latest connection (to answer on it), if known."""
        return self._replies.get(sender)

    # -- checks ---------------------------------------------------------------------------

    def _refuse_probe(self, rid: bytes, proto: str) -> None:
        """Answer a probe's Hello from a process of another wire version with a `Refuse` that
        names both versions, on the connection it came in on. Hello, Welcome and Refuse are
        encoded alike in every version (protocol/SCHEMA.md: tags 10-19), so the probe of any
        version reads it and fails at once (its `HandshakeError`); without it, it waited for
        its timeout and then said no node answered. Only single-message probes are answered
        (a probe sends one Hello per connection)."""
        reason = (f"protocol version mismatch: expected {_PROTO}, got {proto} (this node "
                  f"speaks zmesh wire protocol {_PROTO}, the connecting process {proto}); run "
                  "the same zmesh version on every member")
        try:
            self._router.send_multipart([rid, encode(Refuse(reason))], zmq.NOBLOCK)
        except zmq.ZMQError:
            pass  # (gone, or its queue is full: it then times out as before)

    def _unmetered(self, rid: bytes, frame: zmq.Frame, n: int) -> str | None:
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
        self.dropped_unnamed += n
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

    def _admit(self, rid: bytes, sender: str, key: str, frame: zmq.Frame,
               frames: list[Buffer], n: int) -> bool:
        """A tcp claim of `key` to `sender`: True to deliver now; else it is held while the
        address is asked, or refused."""
        if key == process_keys().public.decode():
            return True  # this process itself (another of its endpoints, or a thread's)
        if sender.startswith(PROBE_PREFIX):
            return self._claim(sender, key, rid, n)  # probes bind nothing: first key holds
        if not sender.startswith(_PROVABLE):
            self._spoofed(sender, key, n, "no process that could be asked over tcp")
            return False
        if sender in self._own_addresses():
            self._spoofed(sender, key, n, "this process")  # (its own keys were let in above)
            return False
        owner = self._owners.get(sender)
        if owner == key:
            self._owners.move_to_end(sender)
            return True
        until = self._refused.get((key, sender))
        if until is not None:
            if until > time.monotonic():
                self._spoofed(sender, key, n, _whose(owner))
                return False
            del self._refused[(key, sender)]
        if self.proofs.hold(sender, key, rid, frames, n):
            self._track_fd(rid, frame)
        else:
            self._warnings.warn("dropped a message claiming to be %s: too many messages are "
                                "held while their senders' addresses are asked", sender)
        return False

    def _settled(self, name: str, owner: str | None, claims: dict[str, Claim]) -> None:
        """The address `name` answered that `owner` receives there (None: no answer in time):
        deliver the held messages of that key's claim, refuse the others'."""
        if owner is None:
            dropped = sum(c.count for c in claims.values())
            self.refused_unproven += dropped
            self._warnings.warn(
                "dropped %d message(s) claiming to be %s: nobody at that address answered "
                "for their key within %gs (a process that exited, or one claiming another "
                "process's name?)", dropped, name, self.proofs.timeout)
            return
        previous = self._owners.get(name)
        self._owners[name] = owner
        self._owners.move_to_end(name)
        if len(self._owners) > self._max_names:
            self._owners.popitem(last=False)
        if previous is not None and previous != owner:
            self._evict(name)  # a new process at that address: the old key's connections go
        for key, claim in claims.items():
            if key == owner:
                for rid in claim.rids:
                    self._remember(rid, name)
                self.proofs.ready.extend((name, frames) for frames in claim.messages)
                continue
            self._refused[(key, name)] = time.monotonic() + _BACKOFF_S
            if len(self._refused) > self._max_names:
                self._refused.popitem(last=False)
            self._spoofed(name, key, claim.count, _whose(owner))

    def _spoofed(self, name: str, key: str, count: int, owner: str) -> None:
        self.refused_spoof += count
        self._warnings.warn(
            "refused %d message(s) claiming to be %s from key %s...: that address belongs "
            "to %s (a member claiming another process's name?)", count, name, key[:8], owner)

    def _evict(self, name: str) -> None:
        for rid in [r for r, s in self.connections.items() if s == name]:
            del self.connections[rid]
            self._forget(rid, name, gone=False)

    def _claim(self, sender: str, key: str, rid: bytes, n: int = 1) -> bool:
        held = self._claims.get(sender)
        if held is not None and held[0] != key and (self._live.get(sender, 0) > 0
                                                     or self._alive(held[1])):
            self.refused_spoof += n
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
        if gone:  # its last connection closed: the name is free (a proven owner is kept)
            held = self._claims.pop(sender, None)
            for key in (held[0] if held is not None else None, self._owners.get(sender),
                        process_keys().public.decode()):
                if key is not None:
                    self._vouched.pop((key, sender), None)
