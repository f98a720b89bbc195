"""The simulation kernel: a virtual clock, one seeded event queue, and cooperative threads.

Everything a simulated mesh does is an event on one heap, ordered by (virtual time, sequence
number): a message delivery, a timer, a posted call. Code that must block (a driver's `get`,
a worker's executor waiting for work, a task calling `get` inside itself) runs on a real
thread, but exactly one thread runs at a time: a blocked thread parks with a predicate and the
thread that owns the simulation (the one that entered the mesh, the "root") runs events until
some parked thread's predicate holds, then hands it the baton and waits for it to park again.
Nothing depends on the OS scheduler, so a run is a function of its seed.

Killing a simulated process raises `SimKilled` (a BaseException) in each of its parked
threads, so user code unwinds as if the process had vanished.
"""

from __future__ import annotations

import collections
import heapq
import itertools
import logging
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from zmesh.errors import ZmeshError
from zmesh.runtime import context

__all__ = ["Kernel", "SimDeadlock", "SimKilled", "SimProcess"]

logger = logging.getLogger("zmesh.sim")


class SimKilled(BaseException):
    """Raised inside a simulated thread whose process was killed; ends that thread."""


class SimDeadlock(ZmeshError):
    """The root waited while nothing could ever happen (or past the kernel's stall limit)."""


@dataclass(eq=False)
class SimProcess:
    """One simulated process (a node, a driver, a worker) living on host `host`."""

    name: str
    host: str
    client: Any = None  # the core client that `zmesh.*` calls use while this process runs
    alive: bool = True
    paused: bool = False
    held: list[Any] = field(default_factory=list)  # events that came while paused
    threads: list[_SimThread] = field(default_factory=list)
    on_kill: list[Callable[[], None]] = field(default_factory=list)


@dataclass(order=True)
class _Event:
    at: float
    seq: int
    proc: SimProcess | None = field(compare=False)
    fn: Callable[..., Any] = field(compare=False)
    args: tuple[Any, ...] = field(compare=False, default=())


class _SimThread:
    """A real thread that runs only while it holds the kernel's baton."""

    def __init__(self, kernel: Kernel, proc: SimProcess, target: Callable[[], Any],
                 name: str) -> None:
        self.kernel = kernel
        self.proc = proc
        self.target = target
        self.killed = False
        self.done = False
        self.pred: Callable[[], Any] = lambda: True
        self.deadline: float | None = None
        self.seq = next(kernel._seq)
        self.thread = threading.Thread(target=self._main, name=f"zmesh-sim-{name}", daemon=True)

    def _main(self) -> None:
        k = self.kernel
        with k._cond:
            while k._active is not self:
                k._cond.wait()
        try:
            if not self.killed:
                self.target()
        except SimKilled:
            pass
        except BaseException:  # noqa: BLE001 - a simulated thread's crash is logged
            logger.exception("simulated thread %s crashed", self.thread.name)
        finally:
            self.done = True
            k._parked.pop(self.seq, None)
            with k._cond:
                k._active = None
                k._cond.notify_all()


class Kernel:
    """The virtual clock and event queue of one simulation (see the module docstring).

    `stall_limit`: the most virtual seconds the root may wait without a deadline before
    `SimDeadlock` is raised (a hung `get` in a test becomes a failure with a story).
    """

    def __init__(self, seed: int, *, stall_limit: float = 600.0) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.now = 0.0
        self.stall_limit = stall_limit
        self.steps = 0
        # (at, seq, event): plain tuples compare in C. A Python __lt__ (a dataclass's) can
        # allocate, so the GC may run a finalizer mid-push that schedules onto this same
        # heap (an ObjectRef's __del__ posting its free): 'list changed size' in heappush.
        self._heap: list[tuple[float, int, _Event]] = []
        self._foreign: collections.deque[_Event] = collections.deque()  # see schedule()
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._active: _SimThread | None = None  # None: the root runs
        self._parked: dict[int, _SimThread] = {}
        self.root = threading.current_thread()
        self.root_client: Any = None
        self.closed = False

    # -- events ----------------------------------------------------------------------------
    def schedule(self, at: float, proc: SimProcess | None, fn: Callable[..., Any],
                 *args: Any) -> None:
        """Run `fn(*args)` at virtual time `at` as process `proc` (dropped if it died)."""
        if self.closed:
            return
        ev = _Event(max(at, self.now), next(self._seq), proc, fn, args)
        cur = threading.current_thread()
        active = self._active
        if cur is not self.root and (active is None or active.thread is not cur):
            # A thread outside the simulation: the garbage collector runs finalizers (an
            # ObjectRef's __del__ posts its free) on whichever thread it interrupts, e.g. a
            # daemon thread of an earlier test. Pushing onto the heap from there races the
            # thread holding the baton; the root takes these in at its next step instead.
            self._foreign.append(ev)
            return
        heapq.heappush(self._heap, (ev.at, ev.seq, ev))

    def _take_foreign(self) -> None:
        while self._foreign:
            ev = self._foreign.popleft()
            heapq.heappush(self._heap, (ev.at, ev.seq, ev))

    def _run_event(self, ev: _Event) -> None:
        proc = ev.proc
        if proc is not None:
            if not proc.alive:
                return
            if proc.paused:
                proc.held.append(ev)
                return
        self.steps += 1
        saved = context.maybe_client()
        context.set_client(proc.client if proc is not None else None)
        try:
            ev.fn(*ev.args)
        except SimKilled:
            pass
        except Exception:
            logger.exception("simulated event %r failed", ev.fn)
        finally:
            context.set_client(saved)

    def resume(self, proc: SimProcess) -> None:
        """Unpause: what queued up while paused is delivered now, in its order."""
        proc.paused = False
        held, proc.held = proc.held, []
        for ev in held:
            self.schedule(self.now, ev.proc, ev.fn, *ev.args)

    # -- threads ---------------------------------------------------------------------------
    def spawn(self, proc: SimProcess, target: Callable[[], Any], name: str) -> None:
        """Start `target` on a simulated thread of `proc`; it first runs at the next step."""
        t = _SimThread(self, proc, target, name)
        proc.threads.append(t)
        self._parked[t.seq] = t
        t.thread.start()

    def in_root(self) -> bool:
        return threading.current_thread() is self.root

    def wait_until(self, pred: Callable[[], Any], timeout: float | None) -> bool:
        """Block until `pred()` holds or `timeout` virtual seconds pass; True if it holds.

        On the root this runs the simulation; on a simulated thread it parks. A thread of a
        killed process gets SimKilled instead.
        """
        if pred():
            return True
        if timeout is not None and timeout <= 0:
            return False
        if self.in_root():
            return self._run_root(pred, timeout)
        me = self._current()
        if me is None:
            raise ZmeshError("a thread outside the simulation blocked on the simulated mesh; "
                             "threads started by user code are not simulated")
        if me.killed:
            raise SimKilled
        me.pred = pred
        me.deadline = None if timeout is None else self.now + timeout
        me.seq = next(self._seq)  # parked threads resume in the order they parked
        self._parked[me.seq] = me
        with self._cond:
            self._active = None
            self._cond.notify_all()
            while self._active is not me:
                self._cond.wait()
        if me.killed:
            raise SimKilled
        return bool(pred())

    def _current(self) -> _SimThread | None:
        active = self._active
        if active is not None and active.thread is threading.current_thread():
            return active
        return None

    def _run_root(self, pred: Callable[[], Any], timeout: float | None) -> bool:
        deadline = None if timeout is None else self.now + timeout
        stall = self.now + self.stall_limit
        while True:
            self._take_foreign()
            if pred():
                return True
            if self._resume_ready():
                continue
            at = self._next_time()
            if deadline is not None and (at is None or at > deadline):
                self.now = max(self.now, deadline)
                return bool(pred())
            if at is None:
                raise SimDeadlock(f"nothing left to happen at t={self.now:.3f}s (seed "
                                  f"{self.seed}) while the root waits")
            if deadline is None and at > stall:
                self.now = stall
                raise SimDeadlock(f"waited {self.stall_limit:.0f} virtual seconds without "
                                  f"progress (seed {self.seed}, t={self.now:.3f}s)")
            self._step_to(at)

    def _next_time(self) -> float | None:
        times = [self._heap[0][0]] if self._heap else []
        times += [t.deadline for t in self._parked.values()
                  if t.deadline is not None and t.proc.alive and not t.proc.paused]
        return min(times) if times else None

    def _step_to(self, at: float) -> None:
        self.now = max(self.now, at)
        if self._heap and self._heap[0][0] <= self.now:
            self._run_event(heapq.heappop(self._heap)[2])

    def _resume_ready(self) -> bool:
        """Hand the baton to the first parked thread that can go on; False if none can."""
        for seq in sorted(self._parked):
            t = self._parked[seq]
            if t.proc.paused and not t.killed:
                continue
            try:
                ready = t.killed or t.pred() or (t.deadline is not None and
                                                 t.deadline <= self.now)
            except Exception:  # noqa: BLE001 - a broken predicate wakes its thread to fail
                ready = True
            if ready:
                self._parked.pop(seq, None)
                self._switch_to(t)
                return True
        return False

    def _switch_to(self, t: _SimThread) -> None:
        saved = context.maybe_client()
        context.set_client(t.proc.client)
        try:
            with self._cond:
                self._active = t
                self._cond.notify_all()
                while self._active is not None:
                    self._cond.wait()
        finally:
            context.set_client(saved)

    def run_for(self, seconds: float) -> None:
        """Advance virtual time by `seconds`, running everything due (root only)."""
        self._run_root(lambda: False, seconds)

    # -- faults ----------------------------------------------------------------------------
    def kill(self, proc: SimProcess) -> None:
        """The process vanishes: its pending events are dropped and its threads unwind."""
        if not proc.alive:
            return
        proc.alive = False
        proc.paused = False
        proc.held.clear()
        for t in list(proc.threads):
            if not t.done:
                t.killed = True
                if self.in_root() and self._active is None:
                    self._parked.pop(t.seq, None)
                    self._switch_to(t)
        for fn in proc.on_kill:
            try:
                fn()
            except Exception:
                logger.exception("cleanup of killed process %s failed", proc.name)

    def close(self) -> None:
        """Stop: every simulated thread unwinds; later events are dropped."""
        self.closed = True
        self._heap.clear()
        self._foreign.clear()
        for t in sorted(self._parked.values(), key=lambda t: t.seq):
            t.killed = True
        while self._parked:
            seq = min(self._parked)
            t = self._parked.pop(seq)
            if not t.done and self.in_root():
                self._switch_to(t)
