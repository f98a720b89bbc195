"""A sync actor's own inbox: its calls reach the executor thread with no hop through the loop.

An actor whose calls run one at a time on the executor thread (not async, max_concurrency
1, no concurrency groups) gets an endpoint of its own, opened by the executor thread once
the instance exists and announced as the actor's `ActorState.call_address`. Callers send
their `ActorCall`s there, and the executor thread, idle between calls, receives them
itself. Through the loop, each call cost a hand-off between two threads: the loop thread
woke for the message, decoded it and queued it, the executor thread woke for the queue and
often slept again on the GIL until the loop thread blocked (issue 8's `actor_sync`: 1.0
wake-up of the loop thread and ~1.8 of the executor per call, against 1.0 here).

What stays with the loop: everything else sent to the worker's address (cancels, borrows,
the node's messages), and replies, which the executor sends as before (its thread sender,
from the worker's address). The inbox only receives.

Closed by default as any endpoint: it is one of the same transport, opened with this
process's credentials, so a tcp caller is CURVE-authenticated and its address proven before
its message is handed out. Only `ActorCall`s are taken; anything else is dropped with a
warning. A call that reaches the loop anyway (`forward`) is handed to the inbox's thread, so
that the per-caller order (the mailbox) stays on one thread.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from zmesh.errors import TransportError
from zmesh.protocol import codec
from zmesh.protocol.messages import runtime as m
from zmesh.transports import open_endpoint

logger = logging.getLogger(__name__)

INBOX_ENV = "ZMESH_ACTOR_INBOX"
"""Set to 0 in a worker's environment to keep every actor call on the loop's endpoint."""
STOP_WAIT_S = 1.0
"""How long `stop` waits for the executor thread to close the inbox (it may be running a
call); the socket file is removed either way."""


def inbox_address(address: str) -> str | None:
    """Where the inbox of the worker at `address` binds: beside it (ipc: a second socket
    file in the same directory; tcp: the same host, a free port), or None (another
    transport: no inbox)."""
    if address.startswith("ipc://") and address.endswith(".sock"):
        return f"{address[:-len('.sock')]}-calls.sock"
    if address.startswith("tcp://"):
        host = address[len("tcp://"):].rsplit(":", 1)[0]
        return f"tcp://{host}:0" if host else None
    return None


class ActorInbox:
    """The endpoint a sync actor's calls come to; owned by the executor thread (`serve`)."""

    def __init__(self, endpoint: Any) -> None:
        self.endpoint = endpoint
        self.address: str = endpoint.address
        self._forwarded: deque[tuple[str, m.ActorCall]] = deque()
        self._stopping = False
        self._closed = threading.Event()
        self._drops = codec.DropWarnings(logger)

    @classmethod
    def open_beside(cls, worker_address: str) -> ActorInbox | None:
        """An inbox beside the worker's endpoint, or None where there is none to be had
        (turned off, another transport, no address or socket free): calls then go through
        the loop as before."""
        if os.environ.get(INBOX_ENV, "1") == "0":
            return None
        address = inbox_address(worker_address)
        if address is None:
            return None
        try:
            return cls(open_endpoint(address))
        except TransportError as exc:
            logger.debug("no actor inbox at %s: %s", address, exc)
            return None

    # -- any thread ------------------------------------------------------------------------
    def forward(self, sender: str, call: m.ActorCall) -> None:
        """Hand the inbox's thread a call that came to the loop instead (loop thread)."""
        self._forwarded.append((sender, call))
        self._wake()

    def stop(self) -> None:
        """Make `serve` close the inbox and return; wait for that a little (the executor may
        be in a call), and remove an ipc socket file left behind in any case."""
        self._stopping = True
        self._wake()
        if not self._closed.wait(STOP_WAIT_S):
            _unlink_socket(self.address)

    def _wake(self) -> None:
        try:
            self.endpoint.wake()
        except TransportError:
            pass

    # -- the executor thread ---------------------------------------------------------------
    def serve(self, on_call: Callable[[str, m.ActorCall], None]) -> str:
        """Receive calls and run `on_call(sender, call)` for each, in arrival order, until
        `stop` (returns '') or the endpoint fails (returns why: no call can reach the actor
        any more); then close the endpoint."""
        endpoint = self.endpoint
        forwarded = self._forwarded
        try:
            while not self._stopping:
                try:
                    item = endpoint.recv(None)
                except TransportError as exc:
                    if self._stopping:
                        return ""
                    logger.error("actor inbox %s failed: %s", self.address, exc)
                    return f"its call endpoint {self.address} failed: {exc}"
                while forwarded:
                    on_call(*forwarded.popleft())
                if item is None or self._stopping:
                    continue
                call = self._decode(*item)
                if call is not None:
                    on_call(item[0], call)
            return ""
        finally:
            endpoint.close()
            self._closed.set()

    def _decode(self, sender: str, frames: list[Any]) -> m.ActorCall | None:
        try:
            msg = codec.decode_small(frames[0]) if len(frames) == 1 else None
            if msg is None:
                unpacked = codec.safe_unpack(frames, sender=sender, warnings=self._drops)
                if unpacked is None:
                    return None
                msg = unpacked[0]
        except Exception:  # a decoder bug must not end the actor's calls
            logger.exception("actor inbox: cannot decode a message from %s; dropped", sender)
            return None
        if type(msg) is not m.ActorCall:
            self._drops.warn("actor inbox %s: %s from %s is not an actor call; dropped",
                             self.address, type(msg).__name__, sender)
            return None
        return msg


def _unlink_socket(address: str) -> None:
    if not address.startswith("ipc://"):
        return
    path = address[len("ipc://"):]
    try:
        if stat.S_ISSOCK(os.stat(path).st_mode):
            os.unlink(path)
    except OSError:
        pass


class SpareInbox:
    """An inbox opened ahead of need, while the worker's executor thread waits for its first
    work, so that a sync actor created on this worker announces "alive" without first
    binding an endpoint (measured: 0.8 ms of a 4 ms create-and-first-call in the worker,
    against 0.06 ms for the other actor kinds). A worker whose first work is anything else
    closes it unused.

    It is bound but unannounced: no caller knows its address until "alive" names it, and it
    is an endpoint of the same transport with the same credentials as any other. Owned by
    whichever thread takes it; `discard` may come from any thread (the worker exiting)."""

    def __init__(self, open_: Callable[[], ActorInbox | None]) -> None:
        self._open = open_
        self._lock = threading.Lock()
        self._inbox: ActorInbox | None = None
        self._done = False  # taken or discarded: never opened (again)

    def prepare(self) -> None:
        """Open the spare (the executor thread, before its first work)."""
        with self._lock:
            if self._done:
                return
        inbox = self._open()
        if inbox is None:
            return
        with self._lock:
            if not self._done:
                self._inbox, inbox = inbox, None
        if inbox is not None:  # discarded meanwhile
            inbox.endpoint.close()

    def take(self) -> ActorInbox | None:
        """The spare, now the caller's own (None if there is none); no more is opened."""
        with self._lock:
            self._done = True
            inbox, self._inbox = self._inbox, None
        return inbox

    def claim(self) -> ActorInbox | None:
        """The spare for the actor being created, unless its environment (runtime_env
        env_vars, applied after the spare was opened) turned inboxes off: then closed."""
        inbox = self.take()
        if inbox is not None and os.environ.get(INBOX_ENV, "1") == "0":
            inbox.endpoint.close()
            return None
        return inbox

    def discard(self) -> None:
        """Close the spare if nobody took it (its socket file goes with it)."""
        inbox = self.take()
        if inbox is not None:
            inbox.endpoint.close()
