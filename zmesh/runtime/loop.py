"""The event loop each process runs: one thread owns the endpoint, timers and handlers.

Other threads (user code, executors) never touch sockets: they hand work to the loop with
`call_soon`, which wakes it only when it is asleep in `recv`. Shells read the time with
`clock()` and block only through `wait_event` / `wait_future` / `wait_for`, so a simulated
loop (`zmesh.testing.sim_mesh`) can replace the clock and the blocking with virtual ones.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any, Protocol

from zmesh.errors import TransportError
from zmesh.protocol import codec
from zmesh.protocol.messages.base import Message
from zmesh.transports.base import Endpoint

logger = logging.getLogger(__name__)

Handler = Callable[[str, Any, list[Any]], None]
IDLE_CONNECTION_S = 60.0
"""An outbound connection unused this long is closed (reopened on the next send)."""
TIMER_SLACK_S = 0.002
"""How late past its time a timer may run, so that the receive timeout changes seldom."""
COALESCE_ENV = "ZMESH_COALESCE"
"""Set to 0 to send every message in a frame of its own (see `transports.zmq_batch`)."""


class Waitable(Protocol):
    """What `wait_event` waits on: a threading.Event, or one like it."""

    def is_set(self) -> bool: ...

    def wait(self, timeout: float | None = None) -> bool: ...


class EventLoop:
    """Dispatches inbound messages by type, runs timers and calls posted from other threads."""

    def __init__(self, endpoint: Endpoint, name: str) -> None:
        self.endpoint = endpoint
        self.address = endpoint.address
        self.name = name
        self._handlers: dict[type, Handler] = {}
        self.received = 0  # messages decoded and dispatched since start
        self._calls: deque[tuple[Callable[..., Any], tuple[Any, ...]]] = deque()
        self._timers: list[tuple[float, int, Callable[[], Any]]] = []
        self._timer_seq = itertools.count()
        self._sleeping = False
        self._stopping = False
        self._wait = -1.0  # the receive timeout last asked for (see `_timeout`)
        self._when_idle: list[Callable[[], Any]] = []  # see `call_when_idle`
        self._idle_by = 0.0  # when they run whatever waits
        self.thread: threading.Thread | None = None
        # the thread running `run` (its own thread, or a worker's main thread); None until
        # then, and in a simulated loop, which the kernel runs
        self.run_thread: threading.Thread | None = None
        # Fault injection (zmesh.testing.Cluster.cut): peers whose messages are dropped both
        # ways, as if the link to them were cut.
        self.blocked: frozenset[str] = frozenset()
        self._drops = codec.DropWarnings(logger)
        # The loop receives whenever it runs out of work, so its endpoint may hold small
        # messages to a peer until then and send them as one frame (one encryption).
        if hasattr(endpoint, "coalesce") and os.environ.get(COALESCE_ENV, "1") != "0":
            endpoint.coalesce = True

    # -- time and blocking (a simulated loop overrides these) ------------------------------
    def clock(self) -> float:
        """Seconds on this loop's clock (monotonic; virtual under simulation)."""
        return time.monotonic()

    def wait_event(self, event: Waitable, timeout: float | None) -> bool:
        """Block a user thread until `event` is set or `timeout` passes; True if set."""
        return event.wait(timeout)

    def wait_future(self, fut: Future[Any], timeout: float | None) -> Any:
        """Block a user thread for `fut`'s result; raises TimeoutError when time runs out."""
        return fut.result(timeout)

    def wait_for(self, cond: threading.Condition, pred: Callable[[], Any],
                 timeout: float | None) -> bool:
        """Block a user thread until `pred()` holds (checked when `cond` is notified)."""
        with cond:
            return bool(cond.wait_for(pred, timeout))

    # -- registration ----------------------------------------------------------------------
    def on(self, msg_type: type[Message], handler: Handler) -> None:
        """Call `handler(sender, message, buffers)` for every inbound message of this type."""
        self._handlers[msg_type] = handler

    # -- posting work ----------------------------------------------------------------------
    def call_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run `fn(*args)` on the loop thread; safe from any thread."""
        self._calls.append((fn, args))
        if self._sleeping:
            self.endpoint.wake()

    def call_later(self, delay: float, fn: Callable[[], Any]) -> None:
        """Run `fn()` on the loop thread after `delay` seconds (loop thread only)."""
        heapq.heappush(self._timers, (self.clock() + delay, next(self._timer_seq), fn))

    def call_when_idle(self, fn: Callable[[], Any], max_wait: float) -> None:
        """Run `fn()` on the loop thread once no received message waits to be handled, or
        after `max_wait` seconds whatever waits (loop thread only). For verdicts that must
        not miss a message already here: a timer runs before the messages that queued
        while the loop was busy, such as the answer it is about to give up on."""
        by = time.monotonic() + max_wait  # (the loop looks at it while any wait: no timer)
        if not self._when_idle or by < self._idle_by:
            self._idle_by = by
        self._when_idle.append(fn)

    def _run_when_idle(self) -> None:
        waiting, self._when_idle = self._when_idle, []
        for fn in waiting:
            self._guard(fn, ())

    def send(self, to: str, msg: Message, buffers: Sequence[Any] = ()) -> bool:
        """Send a message (loop thread only); False, logged, when the peer cannot be reached."""
        if self.blocked and to in self.blocked:
            return False
        try:
            self.endpoint.send(to, codec.pack(msg, buffers) if buffers else [codec.encode(msg)])
            return True
        except TransportError as exc:
            logger.debug("%s: cannot send %s to %s: %s", self.name, type(msg).__name__, to, exc)
            return False

    def send_threadsafe(self, to: str, msg: Message) -> None:
        """Encode here, send from the loop thread."""
        frame = codec.encode(msg)
        self.call_soon(self._send_frames, to, [frame])

    def _send_frames(self, to: str, frames: list[Any]) -> None:
        if self.blocked and to in self.blocked:
            return
        try:
            self.endpoint.send(to, frames)
        except TransportError as exc:
            logger.debug("%s: cannot send to %s: %s", self.name, to, exc)

    # -- running ---------------------------------------------------------------------------
    def start_thread(self) -> None:
        """Run the loop on a daemon thread of its own."""
        self.thread = threading.Thread(target=self.run, name=f"zmesh-{self.name}", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        """Ask the loop to return from `run` soon; safe from any thread."""
        self._stopping = True
        try:
            self.endpoint.wake()
        except TransportError:
            pass

    def _close_idle(self) -> None:
        """Close outbound connections unused for a while, so fds stay bounded over time."""
        close_idle = getattr(self.endpoint, "close_idle", None)
        if close_idle is None or self._stopping:
            return
        try:
            close_idle(IDLE_CONNECTION_S)
        except TransportError:
            return
        self.call_later(IDLE_CONNECTION_S / 2, self._close_idle)

    def run(self) -> None:
        """Serve until `stop`; a handler that raises is logged and the loop goes on."""
        self.run_thread = threading.current_thread()
        self.call_later(IDLE_CONNECTION_S / 2, self._close_idle)
        calls = self._calls
        timers = self._timers
        endpoint = self.endpoint
        while not self._stopping:
            while calls:
                fn, args = calls.popleft()
                self._guard(fn, args)
            timeout: float | None = None
            if timers:
                now = time.monotonic()
                if timers[0][0] <= now:
                    while timers and timers[0][0] <= now:
                        _, _, fn = heapq.heappop(timers)
                        self._guard(fn, ())
                    now = time.monotonic()
                if timers:
                    # `_timeout`, its common case inline (the loop's every turn with a timer)
                    remaining = timers[0][0] - now
                    timeout = self._wait
                    if not 0.0 <= timeout - remaining <= TIMER_SLACK_S:
                        timeout = self._timeout(remaining)
            if calls or self._stopping:
                continue
            if self._when_idle:  # a look at the inbox first: handle what waits there
                try:
                    item = endpoint.recv(0)
                except TransportError:
                    break
                if item is not None:
                    self._dispatch(*item)
                if item is None or time.monotonic() >= self._idle_by:
                    self._run_when_idle()
                continue
            self._sleeping = True
            if calls:
                self._sleeping = False
                continue
            try:
                item = endpoint.recv(timeout)
            except TransportError:
                break
            finally:
                self._sleeping = False
            # One message, then calls and timers again, then a receive that returns at once
            # while messages wait: no "anything waiting?" question between messages (on a
            # ZeroMQ socket that question costs a poll() system call, with nothing found
            # and with a message alike), and no flood starves calls or timers.
            if item is not None:
                self._dispatch(*item)
        try:
            endpoint.flush()  # what the last turn held goes before whoever stopped us waits
        except TransportError:
            pass

    def _timeout(self, remaining: float) -> float:
        """The receive timeout for a timer `remaining` s away: the last one asked for while
        it ends at most TIMER_SLACK_S after the timer is due (the receive timeout, a socket
        option, then changes once per TIMER_SLACK_S while messages flow, not at every
        wait), else exactly `remaining`. Never shorter than `remaining`: rounding waits down
        (to powers of two ms, until stop22) woke an idle loop ~log2(ms) times per timer,
        ~80 times a second on an idle node."""
        wait = self._wait
        if not 0.0 <= wait - remaining <= TIMER_SLACK_S:
            wait = self._wait = max(0.0, remaining)
        return wait

    def _dispatch(self, sender: str, frames: list[Any]) -> None:
        if self.blocked and sender in self.blocked:
            return
        # a header alone (most messages) decodes in one call; anything else, or a frame
        # that does not decode, takes safe_unpack's checks (which log why it is dropped)
        try:
            msg = codec.decode_small(frames[0]) if len(frames) == 1 else None
            if msg is not None:
                buffers: list[Any] = []
            else:
                unpacked = codec.safe_unpack(frames, sender=sender, warnings=self._drops)
                if unpacked is None:
                    return
                msg, buffers = unpacked
        except Exception:  # a decoder bug must not stop the process either
            logger.exception("%s: cannot decode a message from %s; dropped", self.name, sender)
            return
        self.received += 1  # for the message-rate metric (zmesh dashboard's /metrics)
        handler = self._handlers.get(type(msg))
        if handler is None:
            self._drops.warn("%s: no handler for %s from %s; dropped", self.name,
                             type(msg).__name__, sender)
            return
        try:
            handler(sender, msg, buffers)
        except Exception:  # a buggy peer's message must not stop the loop nor flood the log
            self._drops.warn("%s: handler for %s from %s failed", self.name,
                             type(msg).__name__, sender, exc_info=True)

    def _guard(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        try:
            fn(*args)
        except Exception:
            logger.exception("%s: callback %r failed", self.name, fn)


