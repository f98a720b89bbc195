"""One collective group in one member process: a torch.distributed process group plus a
watchdog, so that a member that dies fails the others' collectives instead of hanging them.

The watchdog beats a counter per member in the group's store (the mesh's KV); a member
whose counter stops for `dead_after_s`, a store that stops answering (our node is gone), or
a collective that errs (gloo sees a peer's socket close) breaks the group: every pending and later collective
raises CollectiveError naming the member, and the group must be created again.
"""

from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Callable
from typing import Any

from zmesh.collective.types import CollectiveError

# Each beat is 1 + world_size KV round trips through the node (a write, then the "broken"
# flag and every peer's counter): at 0.5 s a two-member group's beats woke the members'
# threads ~65 times a second and took ~0.7 ms of CPU per 64 MB allreduce from gloo. So a
# watchdog beats once a second at most, and four times per dead_after_s at least: a peer's
# counter is seen stale for up to its beat gap plus our own interval, so a peer's beat may
# come up to ~3/4 of dead_after_s late before it is taken for dead (at one beat a second, a
# group with dead_after_s=1 declared a healthy member dead at its first late beat).
HEARTBEAT_S = 1.0
BEATS_PER_DEAD_AFTER = 4
# The smallest dead_after_s a group accepts: the beats go through the nodes' KV, whose loop
# turns take hundreds of ms under load (the mesh itself suspects a node only after 1 s), so
# below this a healthy member would be declared dead whenever its node is busy.
MIN_DEAD_AFTER_S = 1.0
WAIT_SLICE_S = 0.25  # how soon a caller blocked in a gloo collective sees its group break
POINT_TO_POINT = ("send", "recv")  # gloo: waited on in a thread, never in slices
_SLICE = datetime.timedelta(seconds=WAIT_SLICE_S)


def check_dead_after(dead_after_s: object) -> float:
    """`dead_after_s` as a float, or ValueError saying why the watchdog cannot keep it."""
    if isinstance(dead_after_s, bool) or not isinstance(dead_after_s, (int, float)):
        raise ValueError(f"dead_after_s must be a number of seconds, got {dead_after_s!r}")
    value = float(dead_after_s)
    if not value >= MIN_DEAD_AFTER_S:  # NaN too
        raise ValueError(f"dead_after_s must be at least {MIN_DEAD_AFTER_S:g} s, got "
                         f"{dead_after_s!r}: the members' heartbeats go through the nodes' "
                         f"KV, and a busy node delays them by hundreds of ms, so a shorter "
                         f"window would declare healthy members dead")
    return value


def beat_interval(dead_after_s: float) -> float:
    """How often a watchdog beats and looks at its peers: once a second, or more often when
    `dead_after_s` is short, so that a peer is seen alive several times per window."""
    return min(HEARTBEAT_S, dead_after_s / BEATS_PER_DEAD_AFTER)


class CollectiveGroup:
    """A member's view of one group (thread-safe; collectives may come from any thread)."""

    def __init__(self, name: str, nonce: str, rank: int, world_size: int, backend: str,
                 store: Any, dead_after_s: float, op_timeout_s: float) -> None:
        import torch.distributed as dist

        self.name = name
        self.nonce = nonce
        self.rank = rank
        self.world_size = world_size
        self.backend = backend
        self.store = store
        self.dead_after_s = check_dead_after(dead_after_s)
        timeout = datetime.timedelta(seconds=op_timeout_s)
        if backend == "nccl":
            self.pg: Any = dist.ProcessGroupNCCL(store, rank, world_size,
                                                 dist.ProcessGroupNCCL.Options())
        else:
            self.pg = dist.ProcessGroupGloo(store, rank, world_size, timeout)
        self.broken: str = ""
        self._sliced = backend == "gloo"  # gloo collectives are waited on in slices
        self._lock = threading.Lock()
        self._pending: set[threading.Event] = set()
        self._stop = threading.Event()
        self._monitor_store = store
        self._monitor = threading.Thread(target=self._watch, name=f"collective-{name}",
                                         daemon=True)
        self._monitor.start()

    # -- collectives -------------------------------------------------------------------------
    def run(self, what: str, start: Callable[..., Any], *args: Any) -> None:
        """Start a collective (`start(*args)` returns its torch Work) and wait for it, or for
        the group to break. The hot path of a training loop: as few Python frames as a
        plain `pg.allreduce([t]).wait()` can afford (each costs microseconds when the
        collective has just flushed the caches), so no closure and no helper per call."""
        if self.broken:
            raise CollectiveError(self._message(what))
        try:
            work = start(*args)
        except Exception as exc:  # noqa: BLE001 - torch raises RuntimeError for peer loss
            self.break_group(f"{what} failed on rank {self.rank}: {exc}")
            raise CollectiveError(self._message(what)) from exc
        if self._sliced and what not in POINT_TO_POINT:
            self._wait_in_slices(what, work)
        else:
            self._wait_for_future(what, work)

    def _wait_in_slices(self, what: str, work: Any) -> None:
        """Wait in torch itself (one wake-up when the collective ends, as a plain
        `work.wait()`), in slices of WAIT_SLICE_S so that a broken group still wakes us: a
        gloo collective whose wait timed out is still pending and can be waited on again.
        Not a send or a recv: there gloo closes the pair when a wait times out (its peer,
        late by more than a slice, then saw "connection closed")."""
        while True:
            try:
                work.wait(_SLICE)
                return
            except Exception as exc:  # noqa: BLE001 - torch raises RuntimeError for both
                if not work.is_completed() and "timed out" in str(exc).lower():
                    self._check(what)  # our slice ran out: go on unless the group broke
                    continue
                self.break_group(f"{what} failed on rank {self.rank}: {exc}")
                raise CollectiveError(self._message(what)) from exc

    def _wait_for_future(self, what: str, work: Any) -> None:
        """Wait for the work's completion on the host through its future (nccl: `wait()`
        only orders the stream), waking at once when the group breaks."""
        done = threading.Event()
        with self._lock:
            self._pending.add(done)
        failure: list[BaseException] = []
        try:
            try:
                future = work.get_future()
            except RuntimeError:  # some works (gloo reduce_scatter) have no future: a thread
                future = None
                threading.Thread(target=_wait_work, args=(work, done, failure),
                                 daemon=True).start()
            if future is not None:
                future.add_done_callback(lambda _f: done.set())
            done.wait()
            self._check(what)
            try:
                if future is not None:
                    future.value()
                elif failure:
                    raise failure[0]
            except Exception as exc:  # noqa: BLE001
                self.break_group(f"{what} failed on rank {self.rank}: {exc}")
                raise CollectiveError(self._message(what)) from exc
        finally:
            with self._lock:
                self._pending.discard(done)

    def _check(self, what: str) -> None:
        if self.broken:
            raise CollectiveError(self._message(what))

    def _message(self, what: str) -> str:
        return (f"collective {what} in group {self.name!r} (rank {self.rank} of "
                f"{self.world_size}) failed: {self.broken}; the group is destroyed, create "
                f"it again to go on")

    # -- failure -----------------------------------------------------------------------------
    def break_group(self, reason: str) -> None:
        """Mark the group broken, tell the other members if the store still answers, and
        wake every pending collective."""
        with self._lock:
            if self.broken:
                return
            self.broken = reason
            pending = list(self._pending)
        try:
            self._monitor_store.set("broken", reason)
        except Exception:  # noqa: BLE001 - the store may be what died
            pass
        for event in pending:
            event.set()

    def _watch(self) -> None:
        store = self._monitor_store
        last: dict[int, tuple[bytes, float]] = {}
        beat = 0
        interval = beat_interval(self.dead_after_s)
        while not self._stop.wait(interval):
            now = time.monotonic()
            beat += 1
            try:
                store.set(f"hb/{self.rank}", str(beat))  # only this member writes its key
                broken = store.peek("broken")
                if broken is not None:
                    self.break_group(broken.decode(errors="replace"))
                    return
                for r in range(self.world_size):
                    if r == self.rank:
                        continue
                    beats = store.peek(f"hb/{r}") or b""
                    seen = last.get(r)
                    if seen is None or seen[0] != beats:
                        last[r] = (beats, now)
                    elif beats and now - seen[1] > self.dead_after_s:
                        self.break_group(f"member rank {r} stopped answering for "
                                         f"{self.dead_after_s:g}s (its process died or hung)")
                        return
            except Exception as exc:  # noqa: BLE001 - our node (the store's way in) is gone
                if not self._stop.is_set():
                    self.break_group(f"the group's store (the mesh's KV) stopped answering: "
                                     f"{exc}")
                return

    def close(self) -> None:
        """Leave the group: stop the watchdog; the process group goes with the object."""
        self._stop.set()
        self.break_group("the group was destroyed")
        self._monitor.join(timeout=5)


def _wait_work(work: Any, done: threading.Event, failure: list[BaseException]) -> None:
    try:
        work.wait()
    except BaseException as exc:  # noqa: BLE001 - handed to the caller
        failure.append(exc)
    finally:
        done.set()
