"""Work waiting on a node: FIFO within one shape, and no shape ever blocks another.

Each queue holds work with the same target (the node, or one placement-group bundle) and
the same resource shapes, so if its head does not fit nothing behind it does either; a
drain visits queue heads oldest first and skips a queue whose head does not fit.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from zmesh.core.resources import ResourceSet
from zmesh.core.scheduling import PlacementGroupId, Request, WorkId

Target = tuple[PlacementGroupId, int] | None
T = TypeVar("T")


class QueuedWork:
    """A request with its shapes resolved, an arrival number, and why it waits."""

    __slots__ = ("req", "place", "hold", "seq", "target", "cancelled", "reason", "infeasible")

    def __init__(self, req: Request, place: ResourceSet, hold: ResourceSet, seq: int) -> None:
        self.req = req
        self.place = place
        self.hold = hold
        self.seq = seq
        self.target: Target = None
        self.cancelled = False
        self.reason = ""
        self.infeasible = False


class WaitQueues:
    """The waiting work of one node; `by_id` is empty exactly when nothing waits."""

    def __init__(self) -> None:
        self.by_id: dict[WorkId, QueuedWork] = {}
        self._queues: dict[tuple[Any, ...], deque[QueuedWork]] = {}

    def __contains__(self, work_id: object) -> bool:
        return work_id in self.by_id

    def __iter__(self) -> Iterator[QueuedWork]:
        return iter(list(self.by_id.values()))

    def push(self, work: QueuedWork, target: Target) -> None:
        work.target = target
        key = (target, work.place, work.hold)
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = deque()
        queue.append(work)
        self.by_id[work.req.work_id] = work

    def remove(self, work_id: WorkId) -> QueuedWork | None:
        """Take one piece of work out (it leaves its deque lazily)."""
        work = self.by_id.pop(work_id, None)
        if work is not None:
            work.cancelled = True
        return work

    def remove_where(self, pred: Callable[[QueuedWork], bool]) -> list[QueuedWork]:
        """Take out every waiting piece of work matching `pred`, oldest first."""
        taken = sorted((w for w in self.by_id.values() if pred(w)), key=lambda w: w.seq)
        for work in taken:
            self.remove(work.req.work_id)
        return taken

    def _head(self, key: tuple[Any, ...]) -> QueuedWork | None:
        queue = self._queues[key]
        while queue and queue[0].cancelled:
            queue.popleft()
        if queue:
            return queue[0]
        del self._queues[key]
        return None

    def drain(self, start: Callable[[QueuedWork], T | None]) -> list[T]:
        """Start work oldest first across queues while it fits (`start` returns None when
        the work does not fit); a queue whose head does not fit is left for later."""
        heap: list[tuple[int, int, tuple[Any, ...]]] = []
        for n, key in enumerate(list(self._queues)):
            head = self._head(key)
            if head is not None:
                heap.append((head.seq, n, key))
        heapq.heapify(heap)
        out: list[T] = []
        while heap:
            _, n, key = heapq.heappop(heap)
            work = self._queues[key][0]
            started = start(work)
            if started is None:
                continue
            self._queues[key].popleft()
            del self.by_id[work.req.work_id]
            out.append(started)
            head = self._head(key)
            if head is not None:
                heapq.heappush(heap, (head.seq, n, key))
        return out

    def take_heads(self, take: Callable[[QueuedWork], T | None]) -> list[T]:
        """From each node-level queue, take work from the front while `take` accepts it
        (used to forward waiting work to nodes that gossip free room)."""
        out: list[T] = []
        for key in list(self._queues):
            if key[0] is not None:
                continue
            while (work := self._head(key)) is not None:
                taken = take(work)
                if taken is None:
                    break
                self._queues[key].popleft()
                del self.by_id[work.req.work_id]
                out.append(taken)
                if not self._queues[key]:
                    del self._queues[key]
                    break
        return out
