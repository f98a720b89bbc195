"""Helpers for the security tests: a one-node mesh, attack payloads, and fd/memory probes."""

from __future__ import annotations

import os
import pickle
import socket
import struct
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import psutil

from zmesh.protocol import codec
from zmesh.protocol.messages import runtime as m
from zmesh.protocol.messages.base import Message

if TYPE_CHECKING:
    import zmq

    from zmesh.security.keys import ClusterCredentials
    from zmesh.transports.zmq_transport import ZmqEndpoint


class OpenFile:
    """Unpickling this creates `path`: proof that a pickle from the sender was loaded."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return open, (self.path, "w")


def create_actor_with_pickle(marker: str, owner: str) -> m.CreateActor:
    """A well-formed CreateActor whose class blob writes `marker` when a worker loads it."""
    return m.CreateActor(
        actor_id=os.urandom(16), owner=owner, fn_id=os.urandom(16), class_name="Evil",
        args=m.Args(), resources={},
        placement={"CPU": 1.0}, fn_blob=pickle.dumps(OpenFile(marker)))


def attack_messages(marker: str, owner: str) -> list[Message]:
    """Everything a stranger tried: code, shutdown, the fault hook, leases, object reads."""
    return [
        create_actor_with_pickle(marker, owner),
        m.Shutdown(reason="stranger"),
        m.Query(request_id=1, what="block", arg=b"\x91\xa0"),
        m.RequestLease(request_id=1, owner=owner, resources={"CPU": 1.0}, name="evil"),
        m.GetObject(object_id=os.urandom(20), requester=owner),
        m.Query(request_id=2, what="function", arg=os.urandom(16)),
    ]


def raw_zmtp_null_dealer(host: str, port: int, identity: bytes,
                         frames: list[bytes]) -> bytes:
    """Talk ZMTP 3.0 with the NULL mechanism over a plain socket (standard library only), as
    a stranger without pyzmq would; returns whatever the node sent back.

    Like libzmq, it sends the signature and major version first and waits for the peer's
    before the rest: libzmq drops a connection that sends its whole greeting, READY and
    messages in one write before it has answered (an earlier version of this helper did,
    so its messages never reached a node, with or without authentication)."""
    greeting = (b"\xff" + b"\x00" * 7 + b"\x01" + b"\x7f" + b"\x03\x00"
                + b"NULL".ljust(20, b"\x00") + b"\x00" + b"\x00" * 31)

    def prop(name: bytes, value: bytes) -> bytes:
        return bytes([len(name)]) + name + struct.pack(">I", len(value)) + value

    ready = b"\x05READY" + prop(b"Socket-Type", b"DEALER") + prop(b"Identity", identity)
    out = b"\x04" + bytes([len(ready)]) + ready
    for i, frame in enumerate(frames):
        more = 0x01 if i < len(frames) - 1 else 0x00
        out += bytes([more | 0x02]) + struct.pack(">Q", len(frame)) + frame
    got = b""
    with socket.create_connection((host, port), timeout=5) as s:
        try:
            s.sendall(greeting[:11])
            while len(got) < 11:  # the peer's signature and major version
                chunk = s.recv(64 - len(got))
                if not chunk:
                    return got
                got += chunk
            s.sendall(greeting[11:])
            while len(got) < 64:  # the rest of its greeting
                chunk = s.recv(64 - len(got))
                if not chunk:
                    return got
                got += chunk
            s.sendall(out)
            s.settimeout(1.0)
            while len(got) < 4096:
                chunk = s.recv(4096)
                if not chunk:
                    break
                got += chunk
        except OSError:
            pass
    return got


def encode(msg: Message) -> bytes:
    return codec.encode(msg)


def fd_count(pid: int) -> int:
    return psutil.Process(pid).num_fds()


def rss(pid: int) -> int:
    return int(psutil.Process(pid).memory_info().rss)


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll `predicate` until true; AssertionError naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.05)


def receiving(endpoint: ZmqEndpoint, done: Callable[[], bool]) -> Callable[[], bool]:
    """`done`, checked after each receive on `endpoint`: a process that sent over tcp keeps
    receiving while it waits, because the receiver asks its address who it is (zmq_proof)."""
    def step() -> bool:
        endpoint.recv(0.05)
        return done()
    return step


def drain_until(server: ZmqEndpoint, done: Callable[[], bool],
                what: str) -> list[tuple[str, list[bytes]]]:
    """Receive on `server` until `done()` holds; returns everything received meanwhile."""
    got: list[tuple[str, list[bytes]]] = []

    def step() -> bool:
        item = server.recv(0.1)
        if item is not None:
            got.append((item[0], [bytes(f) for f in item[1]]))
        return done()

    wait_until(step, 60, what)
    return got


class RecordingProxy:
    """A tcp relay for one connection that records what the client sent (for replays)."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        import threading

        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sent = bytearray()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        import selectors

        client, _ = self.listener.accept()
        server = socket.create_connection(self.upstream)
        sel = selectors.DefaultSelector()
        sel.register(client, selectors.EVENT_READ, server)
        sel.register(server, selectors.EVENT_READ, client)
        try:
            while True:
                for key, _ in sel.select():
                    src: socket.socket = key.fileobj  # type: ignore[assignment]
                    data = src.recv(65536)
                    if not data:
                        return
                    if src is client:
                        with self._lock:
                            self.sent += data
                    key.data.sendall(data)
        except OSError:
            return
        finally:
            client.close()
            server.close()

    def recorded(self) -> bytes:
        with self._lock:
            return bytes(self.sent)

    def close(self) -> None:
        self.listener.close()


def replay(host: str, port: int, data: bytes, timeout: float = 30.0) -> bool:
    """Send `data` on a fresh connection; True when the peer then closes it (refused)."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        try:
            s.sendall(data)
            while s.recv(65536):
                pass
        except TimeoutError:
            return False
        except OSError:
            return True
    return True


def member_dealer(ctx: zmq.Context[zmq.Socket[bytes]], creds: ClusterCredentials,
                  target: str, sender: str, *, vouched: bool = True,
                  proto: str | None = None, routing_id: bytes | None = None,
                  keypair: tuple[bytes, bytes] | None = None,
                  vouched_for: str | None = None) -> zmq.Socket[bytes]:
    """A DEALER connected to `target` as another process of the mesh would be: a CURVE key
    pair of its own (not this process's), vouched for by `creds` unless `vouched=False`,
    naming itself `sender` in its metadata. `proto` overrides the protocol version sent;
    `routing_id`, if given, is the ZMQ_ROUTING_ID it brings (zmesh's own choose none);
    `keypair` (public, secret), if given, is used instead of a new one (a second connection
    of the same process); `vouched_for`, if given, is the name its vouch was made for
    instead of `sender` (a key of one process claiming another's name)."""
    import zmq

    from zmesh.protocol.handshake import PROTOCOL_VERSION
    from zmesh.security import identity

    public, secret = keypair or zmq.curve_keypair()
    dealer = ctx.socket(zmq.DEALER)
    dealer.linger = 0
    if routing_id is not None:
        dealer.setsockopt(zmq.ROUTING_ID, routing_id)
    dealer.curve_publickey, dealer.curve_secretkey = public, secret
    dealer.curve_serverkey = creds.curve_public
    mac = identity.vouch(creds, public, vouched_for or sender) if vouched else "0" * 128
    for prop in (f"X-Zmesh-Proto:{proto or PROTOCOL_VERSION}", f"X-Zmesh-Sender:{sender}",
                 f"X-Zmesh-Key:{public.decode()}", f"X-Zmesh-Vouch:{mac}"):
        dealer.setsockopt(zmq.METADATA, prop.encode())
    dealer.connect(target)
    return dealer


def process_keypair() -> tuple[bytes, bytes]:
    """This process's own key pair (what its endpoints' DEALERs use): a hand-made DEALER with
    it is this process, which a ROUTER of this process admits without asking anyone."""
    from zmesh.security.identity import process_keys

    keys = process_keys()
    return keys.public, keys.secret


class AnsweringMember:
    """A member process's inbound side, made by hand: a CURVE ROUTER bound at a tcp address
    that answers proof-of-address challenges (`transports.zmq_proof`) with the public key of
    `keypair`, in a thread, as a zmesh endpoint's `recv` would. A `member_dealer` with the
    same key pair and `sender=address` is then an honest process with a name of its own.
    `reply`, if given, makes the answer to a nonce (a liar, or a broken peer). Everything
    else it receives is kept in `received`."""

    def __init__(self, ctx: zmq.Context[zmq.Socket[bytes]], creds: ClusterCredentials,
                 keypair: tuple[bytes, bytes] | None = None, port: int = 0,
                 reply: Callable[[bytes], list[bytes]] | None = None) -> None:
        import threading

        import zmq

        self.keypair = keypair or zmq.curve_keypair()
        self._reply = reply  # what it answers a challenge's nonce with, instead of the truth
        self.received: list[list[bytes]] = []
        self.answered = 0
        router = ctx.socket(zmq.ROUTER)
        router.linger = 0
        router.curve_server = True
        router.curve_secretkey = creds.curve_secret

        def bound() -> bool:
            try:  # (a port just given up is freed by libzmq's I/O thread a moment later)
                router.bind(f"tcp://127.0.0.1:{port or '*'}")
            except zmq.ZMQError as exc:
                if exc.errno != zmq.EADDRINUSE:
                    raise
                return False
            return True

        wait_until(bound, 30, f"port {port} to be free")
        self.address = router.getsockopt_string(zmq.LAST_ENDPOINT)
        stop_at = f"inproc://answering-member-{id(self):x}"
        stop = ctx.socket(zmq.PAIR)
        stop.bind(stop_at)
        self._stopper = ctx.socket(zmq.PAIR)
        self._stopper.linger = 0
        self._stopper.connect(stop_at)
        self._thread = threading.Thread(target=self._serve, args=(router, stop), daemon=True)
        self._thread.start()

    def _serve(self, router: zmq.Socket[bytes], stop: zmq.Socket[bytes]) -> None:
        import zmq

        from zmesh.transports.zmq_proof import answer_frame, challenge_nonce

        poller = zmq.Poller()
        poller.register(router, zmq.POLLIN)
        poller.register(stop, zmq.POLLIN)
        try:
            while stop not in dict(poller.poll()):
                rid, *frames = router.recv_multipart()
                nonce = challenge_nonce(frames[0]) if len(frames) == 1 else None
                if nonce is None:
                    self.received.append(frames)
                    continue
                reply = (self._reply(nonce) if self._reply is not None
                         else [answer_frame(nonce, self.keypair[0])])
                self.answered += 1  # (first: the answer may be acted on at once)
                router.send_multipart([rid, *reply])
        finally:
            router.close(linger=0)
            stop.close(linger=0)

    def close(self) -> None:
        self._stopper.send(b"")
        self._thread.join(30)
        self._stopper.close(linger=0)
