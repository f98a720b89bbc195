"""Proof of address: a sender name belongs to the key of the process that receives at it.

A zmesh process is named by the address it receives on. Every process of a mesh holds the
mesh secret, so the vouch a connection presents (`zmesh.security.identity`) shows only that
its key is a member's: a member could mint a vouch for any name. What a member cannot do is
receive at another process's address. So when a ROUTER sees a tcp connection whose CURVE key
K claims a name N that no proof has yet given to K, it holds that connection's messages and
asks the address N itself: it connects a short-lived DEALER to N (marked by the
``X-Zmesh-Proof`` metadata property) and sends a random nonce. The process that really
receives at N reads the challenge in its own `ZmqEndpoint.recv` (never a handler) and
answers, over the same connection, with the nonce and its own public key. That key owns N:
if it is K, the held messages are delivered and later ones pass on the hot path; if not, K
is refused for N (counted as ``spoof``) and N is bound to the key that answered. A challenge
nobody answers within the timeout drops the held messages (``unproven``); the next message
tries again. The answer comes back on the challenger's own outbound connection to N, so
only whoever listens at N can give it, and the nonce ties it to this challenge.

Why not something else: a key bound into the name (``tcp://host:port#key``) would change
every address in the runtime, and a ZAP handler cannot carry the nonce (libzmq's ZAP
request names the client's key and IP, not its routing id or metadata).

What it costs: one extra connection per (name, key) a process first hears from over tcp,
once per process lifetime (proven owners are kept, bounded LRU), plus one round trip
before that first message is delivered. Claims over ipc are believed (only the same user
can reach a 0700 directory, and that user can read the token anyway), and claims by this
process's own key or of this process's own addresses are decided without asking anyone.

Limits: it proves control of an address, no more. A member that can receive at N (it binds N
after its process exited, or intercepts N's traffic on the network with the mesh secret)
becomes N, as it would for every message sent to N anyway.
"""

from __future__ import annotations

import logging
import math
import os
import secrets
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import zmq
from zmq.utils import z85

from zmesh.errors import TransportError
from zmesh.security.identity import PROOF_PROPERTY, process_keys
from zmesh.security.keys import ClusterCredentials

from .base import Buffer, frame_nbytes, live_endpoints
from .zmq_context import prepare_dealer

if TYPE_CHECKING:
    from .zmq_transport import ZmqEndpoint

__all__ = [
    "PROOF_TIMEOUT_ENV", "AddressProofs", "Claim", "answer_frame", "challenge_frame",
    "challenge_nonce", "own_addresses", "proof_timeout", "receive",
]

logger = logging.getLogger("zmesh.transports.peers")

_PREFIX = b"\xc1zmesh-proof/1 "  # 0xc1 is never a msgpack byte: no runtime message starts so
_CHALLENGE = _PREFIX + b"C"
_ANSWER = _PREFIX + b"A"
_NONCE = 16
_KEY = 40  # a Z85 CURVE public key
DEFAULT_TIMEOUT = 20.0
"""Seconds a challenge waits for its answer (the target's loop may be slow under load)."""
PROOF_TIMEOUT_ENV = "ZMESH_PROOF_TIMEOUT"
"""Overrides `DEFAULT_TIMEOUT` for the endpoints of a process (tests shorten it)."""


def proof_timeout(given: float | None) -> float:
    """`given`, else $ZMESH_PROOF_TIMEOUT, else `DEFAULT_TIMEOUT`; TransportError if bad."""
    if given is None:
        raw = os.environ.get(PROOF_TIMEOUT_ENV, "").strip()
        try:
            given = float(raw) if raw else DEFAULT_TIMEOUT
        except ValueError:
            raise TransportError(f"${PROOF_TIMEOUT_ENV} must be a number of seconds, got "
                                 f"{raw!r}") from None
    if not given > 0:
        raise TransportError(f"proof_timeout must be positive, got {given}")
    return given


def own_addresses() -> set[str]:
    """The addresses this process's open endpoints receive at (a claim to one of them by a
    key not this process's is refused without asking)."""
    found: set[str] = set()
    for ep in live_endpoints():
        bound = getattr(ep, "bound_addresses", None)
        if bound is not None and not ep.closed:
            found.update(bound())
    return found


def challenge_frame(nonce: bytes) -> bytes:
    """The one frame a challenger sends to the address it asks about."""
    return _CHALLENGE + nonce


def challenge_nonce(frame: Buffer) -> bytes | None:
    """The nonce of a well-formed challenge frame; None for anything else."""
    if frame_nbytes(frame) != len(_CHALLENGE) + _NONCE:  # (before copying a large frame)
        return None
    raw = bytes(frame)
    return raw[len(_CHALLENGE):] if raw.startswith(_CHALLENGE) else None


def answer_frame(nonce: bytes, public: bytes) -> bytes:
    """The answer of the process at the challenged address: the nonce and its key (Z85)."""
    return _ANSWER + nonce + public


def _answered_key(frame: bytes, nonce: bytes) -> str | None:
    """The key an answer to `nonce` names; None unless well formed and for this nonce."""
    if len(frame) != len(_ANSWER) + _NONCE + _KEY or not frame.startswith(_ANSWER + nonce):
        return None
    key = frame[-_KEY:]
    try:
        if len(z85.decode(key)) != 32:
            return None
        return key.decode("ascii")
    except Exception:  # noqa: BLE001 - z85 raises KeyError, struct.error...: not a key
        return None


@dataclass
class Claim:
    """One key's claim to a name while it is being proven: its connections and the messages
    they sent meanwhile (delivered in arrival order if the claim holds)."""

    rids: dict[bytes, None] = field(default_factory=dict)
    messages: deque[list[Buffer]] = field(default_factory=deque)
    nbytes: int = 0
    count: int = 0
    """Messages held: a batch counts as the messages it holds."""


@dataclass
class _Challenge:
    name: str
    nonce: bytes = field(default_factory=lambda: secrets.token_bytes(_NONCE))
    claims: dict[str, Claim] = field(default_factory=dict)  # key -> its claim
    dealer: zmq.Socket[bytes] | None = None
    deadline: float = 0.0


Settle = Callable[[str, "str | None", dict[str, Claim]], None]
"""Called with a name, the key proven to own it (None: nobody answered in time) and the
claims held for it."""


class AddressProofs:
    """The challenges one ROUTER has in flight, the messages held for them, and answers to
    challenges of others. Runs on the endpoint's thread (from `recv`)."""

    def __init__(self, context: zmq.Context[zmq.Socket[bytes]],
                 credentials: ClusterCredentials | None, settle: Settle, *,
                 timeout: float = DEFAULT_TIMEOUT, max_active: int = 128,
                 max_names: int = 4096, max_held: int = 100_000,
                 max_held_bytes: int = 1 << 30) -> None:
        self._context = context
        self._credentials = credentials
        self._settle = settle
        self.timeout = timeout
        self._max_active = max_active
        self._max_names = max_names
        self._max_held = max_held
        self._max_held_bytes = max_held_bytes
        self.address = ""
        """The name this endpoint sends as (its challenges carry it)."""
        self._names: OrderedDict[str, _Challenge] = OrderedDict()  # started or waiting
        self._by_dealer: dict[zmq.Socket[bytes], _Challenge] = {}
        self._held = 0
        self._held_bytes = 0
        self.ready: deque[tuple[str, list[Buffer]]] = deque()
        """Messages of claims just proven, to be returned by `recv` before anything else."""
        self.overflow = 0
        """Messages dropped because the held queues were full."""
        self.challenges = 0
        """Challenges sent."""
        self.answered = 0
        """Challenges of other processes answered."""
        self.malformed = 0
        """Frames on proof connections that were neither a challenge nor its answer."""

    # -- challenging ----------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        """Whether anything is held, in flight or ready (`recv` then takes its slow path)."""
        return bool(self._names or self.ready)

    def hold(self, name: str, key: str, rid: bytes, frames: list[Buffer], count: int = 1) -> bool:
        """Keep a message of `key`'s claim to `name` until it is proven, challenging `name`
        if no challenge is under way; False: no room, the message is dropped. `count`: how
        many messages it stands for (a batch; see `zmq_batch.count`)."""
        size = sum(frame_nbytes(f) for f in frames)
        challenge = self._names.get(name)
        if (self._held >= self._max_held or self._held_bytes + size > self._max_held_bytes
                or (challenge is None and len(self._names) >= self._max_names)):
            self.overflow += count
            return False
        new = challenge is None
        if challenge is None:
            challenge = self._names[name] = _Challenge(name)
        claim = challenge.claims.get(key)
        if claim is None:
            claim = challenge.claims[key] = Claim()
        claim.rids[rid] = None
        claim.messages.append(frames)
        claim.nbytes += size
        claim.count += count
        self._held += count
        self._held_bytes += size
        if new and len(self._by_dealer) < self._max_active:
            self._start(challenge)
        return True

    def _start(self, challenge: _Challenge) -> None:
        try:
            dealer = self._context.socket(zmq.DEALER)
        except zmq.ZMQError as exc:  # no sockets left (or the context is closing)
            logger.warning("cannot challenge %s: %s", challenge.name, exc)
            self._drop(challenge, None)
            return
        try:
            dealer.linger = 0
            dealer.reconnect_ivl = 250  # a dead address is retried, but not in a tight loop
            prepare_dealer(dealer, challenge.name, self._credentials, self.address)
            dealer.setsockopt(zmq.METADATA, f"{PROOF_PROPERTY}:challenge".encode())
            dealer.connect(challenge.name)
            dealer.send(challenge_frame(challenge.nonce), zmq.NOBLOCK)
        except zmq.ZMQError as exc:
            # (an address zmq cannot even use: nobody can answer there; it expires)
            logger.debug("cannot challenge %s: %s", challenge.name, exc)
        self._by_dealer[dealer] = challenge
        challenge.dealer = dealer
        challenge.deadline = time.monotonic() + self.timeout
        self.challenges += 1

    def dealers(self) -> list[zmq.Socket[bytes]]:
        """The challenge connections an answer may arrive on."""
        return list(self._by_dealer)

    def next_deadline(self) -> float | None:
        """When the first challenge in flight times out (None: none in flight)."""
        if not self._by_dealer and self._names:
            self._start_waiting()  # (none in flight yet some waiting: one failed to start)
        return min((c.deadline for c in self._by_dealer.values()), default=None)

    def read(self, dealer: zmq.Socket[bytes]) -> None:
        """Take what arrived on a challenge connection; settle the challenge if answered."""
        challenge = self._by_dealer.get(dealer)
        if challenge is None:
            return
        for _ in range(16):  # whatever else the peer sends there is read and ignored
            try:
                frames = dealer.recv_multipart(zmq.NOBLOCK)
            except zmq.ZMQError:
                return
            key = _answered_key(frames[0], challenge.nonce) if len(frames) == 1 else None
            if key is not None:
                self._finish(challenge, key)
                return
            if frames != [b""]:  # (an empty frame is a liveness check, see zmq_peers)
                self.malformed += 1

    def expire(self, now: float) -> None:
        """Give up on challenges past their deadline: their held messages are dropped."""
        for challenge in [c for c in self._by_dealer.values() if c.deadline <= now]:
            self._finish(challenge, None)

    def _finish(self, challenge: _Challenge, owner: str | None) -> None:
        self._drop(challenge, owner)
        self._start_waiting()

    def _start_waiting(self) -> None:
        """Start challenges that waited for a free slot, oldest first."""
        for waiting in list(self._names.values()):
            if len(self._by_dealer) >= self._max_active:
                break
            if waiting.dealer is None and self._names.get(waiting.name) is waiting:
                self._start(waiting)

    def _drop(self, challenge: _Challenge, owner: str | None) -> None:
        dealer = challenge.dealer
        if dealer is not None:
            del self._by_dealer[dealer]
            dealer.close(linger=0)
        self._names.pop(challenge.name, None)
        for claim in challenge.claims.values():
            self._held -= claim.count
            self._held_bytes -= claim.nbytes
        self._settle(challenge.name, owner, challenge.claims)

    def discard(self, rid: bytes) -> None:
        """Connection `rid` closed: a claim that holds proves no longer admits it."""
        for challenge in self._names.values():
            for claim in challenge.claims.values():
                claim.rids.pop(rid, None)

    def sizes(self) -> dict[str, int]:
        return {"proving": len(self._names), "held": self._held}

    # -- answering ------------------------------------------------------------------------

    def answer(self, router: zmq.Socket[bytes], rid: bytes, frames: list[Buffer]) -> None:
        """A frame on another process's challenge connection: answer a well-formed
        challenge with our key, on that connection; count anything else."""
        nonce = challenge_nonce(frames[0]) if len(frames) == 1 else None
        if nonce is None:
            self.malformed += 1
            return
        try:
            router.send_multipart([rid, answer_frame(nonce, process_keys().public)],
                                  zmq.NOBLOCK)
        except zmq.ZMQError:
            return  # gone, or its queue full: it will time out and ask again
        self.answered += 1

    def close(self) -> None:
        """Close the challenge connections and drop what they held."""
        for dealer in self._by_dealer:
            dealer.close(linger=0)
        self._by_dealer.clear()
        self._names.clear()
        self.ready.clear()
        self._held = self._held_bytes = 0


def receive(ep: ZmqEndpoint, timeout: float | None) -> tuple[str, list[Buffer]] | None:
    """`ep.recv` while senders are being proven: messages of claims just proven first (in
    the order they came), then the ROUTER and the answers to `ep`'s challenges, polled
    together until a message, a wake-up, or `timeout`."""
    proofs = ep.peers.proofs
    router = ep._router
    deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
    while True:
        if proofs.ready:
            name, frames = proofs.ready.popleft()
            ep._proving = proofs.busy
            if frame_nbytes(frames[0]):
                return name, frames
            item = ep.open_envelope(name, frames)  # a batch: each message in turn
            if item is not None:
                return item
            continue
        now = time.monotonic()
        proofs.expire(now)
        if not proofs.busy:
            ep._proving = False
            return ep.recv(None if deadline is None else max(0.0, deadline - now))
        due = proofs.next_deadline()
        wait = math.inf if due is None else max(0.0, due - now)
        if deadline is not None:
            wait = min(wait, max(0.0, deadline - now))
        if ep._turn:  # never wait holding batches (see Coalescing._end_turn)
            ep._end_turn()
        poller = zmq.Poller()
        poller.register(router, zmq.POLLIN)
        for dealer in proofs.dealers():
            poller.register(dealer, zmq.POLLIN)
        try:
            ready = dict(poller.poll(None if wait == math.inf else math.ceil(wait * 1000)))
        except zmq.ZMQError as exc:
            raise ep._closed_error("recv", exc) from exc
        for sock in ready:
            if sock is not router:
                proofs.read(sock)
        if proofs.ready:
            continue
        if router in ready:
            wakes = ep._wakes
            ep._proving = False
            item = ep.recv(0)  # one message (or none: held, dropped, a wake-up)
            ep._proving = ep._proving or proofs.busy
            if item is not None or ep._wakes != wakes:
                return item
        if deadline is not None and time.monotonic() >= deadline and not proofs.ready:
            return None
