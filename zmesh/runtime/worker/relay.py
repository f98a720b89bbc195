"""A sync actor's executor thread serves the worker's loop itself, so a call runs where it
arrives.

A worker's loop thread hands every call to the executor thread over a queue: a thread
wake-up and, on a busy host, a wait for the GIL on the critical path of every actor call.
For an actor that runs one call at a time (sync, max_concurrency 1, no concurrency groups)
the executor thread serves the event loop itself between calls, and runs each call it
receives with no hand-over; the main thread sleeps meanwhile. User code still runs on the
executor thread only, as in Ray (thread-bound state made in `__init__` keeps working).

While a call runs nobody serves the loop, unless the main thread is given it: at once when
the call (or any thread of the actor) blocks in the runtime (`get`, `wait`, a request to the
node: the loop's `before_wait` hook), before a streaming call (its consumer's acks), or when
a call has run for `STEAL_S` (a long or otherwise blocked call). The executor takes the
loop back once the main thread has nothing left to do. Exactly one thread serves the loop
at a time (`_holder`, under `_state`); the loop is handed over through two binary
semaphores. Calls queue in `ready` in mailbox order and are run only after the loop has
dispatched every message that came before (a cancel behind a call lands first).
Until `enable` (the actor exists) calls go through the executor's queue as before.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from zmesh.runtime.loop import EventLoop

STEAL_S = 0.05
"""A call that runs this long without blocking in the runtime gets the loop served beside it."""

_MAIN, _EXEC = "main", "executor"


class Relay:
    """The turn-taking of a worker's main (loop) thread and its executor thread."""

    def __init__(self, loop: EventLoop) -> None:
        self.loop = loop
        self.enabled = False
        self._state = threading.Lock()  # guards enabled, _holder, _busy
        self._holder = _MAIN  # the thread that may serve the loop now
        self._busy = False  # the executor runs a call (it is not serving the loop)
        self._ready: deque[Any] = deque()  # calls to run, in mailbox order
        self._want_turn = False  # the executor asks the main thread for the loop back
        self._main_go = threading.Lock()  # released: the main thread's turn
        self._exec_go = threading.Lock()  # released: the executor's turn
        self._main_go.acquire()
        self._exec_go.acquire()

    # -- the thread serving the loop -----------------------------------------------------
    def offer(self, call: Any, otherwise: Callable[[Any], None]) -> None:
        """A call may run: it queues for the executor thread; before `enable`,
        `otherwise(call)` (the executor's queue)."""
        if not self.enabled:
            with self._state:
                if not self.enabled:
                    otherwise(call)
                    return
        self._ready.append(call)

    # -- any thread ----------------------------------------------------------------------
    def lend(self) -> None:
        """Have the main thread serve the loop if the executor holds it while running a
        call (the loop's `before_wait`: some thread is about to wait on the loop)."""
        with self._state:
            if self._holder is not _EXEC or not self._busy:
                return
            self._holder = _MAIN
        self._main_go.release()

    # -- the main thread -----------------------------------------------------------------
    def serve_main(self) -> None:
        """The main thread: serve the loop while it is ours; returns when the loop stops."""
        loop = self.loop
        while True:
            loop.serve(until=self._executor_waits)
            if loop.stopping:
                return
            with self._state:
                self._holder = _EXEC
                self._want_turn = False
            self._exec_go.release()
            while not self._main_go.acquire(timeout=STEAL_S):
                with self._state:  # a call has run a while: serve the loop beside it
                    if self._holder is _EXEC and self._busy:
                        self._holder = _MAIN
                        break
            if loop.stopping:
                return

    def _executor_waits(self) -> bool:
        return self._want_turn

    # -- the executor thread -------------------------------------------------------------
    def enable(self, queued: Callable[[], Any]) -> None:
        """From now on calls queue here: first those that the executor's queue holds
        (`queued()` yields them, then None)."""
        with self._state:
            self.enabled = True
            earlier = []
            while (item := queued()) is not None:
                earlier.append(item)
        self._ready.extendleft(reversed(earlier))

    def serve_executor(self, run: Callable[[Any], None], lends: Callable[[Any], bool]
                       ) -> None:
        """The executor thread: serve the loop until a call is ready, run it, and so on;
        `lends(call)`: give the loop to the main thread before running it. Returns (and
        hands the loop to the main thread) when the loop stops."""
        loop = self.loop
        ready = self._ready
        self._take_turn()
        while True:
            loop.serve(until=self._has_ready)  # at once (all read) when a call is ready
            if loop.stopping:
                with self._state:
                    self._holder = _MAIN
                self._main_go.release()
                return
            if self._run(ready.popleft(), run, lends):
                # the main thread serves the loop (cancels land): run what is ready, then
                # take the loop back
                while ready:
                    self._run(ready.popleft(), run, lends)
                self._take_turn()

    def _run(self, call: Any, run: Callable[[Any], None], lends: Callable[[Any], bool]
             ) -> bool:
        """Run one call; True if the main thread serves the loop now."""
        with self._state:
            self._busy = True
        if lends(call):
            self.lend()
        try:
            run(call)
        finally:
            with self._state:
                self._busy = False
                lent = self._holder is _MAIN
        return lent

    def _take_turn(self) -> None:
        self._want_turn = True
        self.loop.call_soon(_nothing)  # wakes the loop if it sleeps: it sees the flag
        self._exec_go.acquire()

    def _has_ready(self) -> bool:
        return bool(self._ready)


def _nothing() -> None:
    pass
