"""ActorPool: spread calls over a fixed set of actors, as Ray's `ray.util.ActorPool`.

`fn(actor, value)` makes the call and returns its ref; the pool runs one call per actor
at a time, queues the rest, and hands results back in submission order (`get_next`) or as
they finish (`get_next_unordered`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import zmesh

Fn = Callable[[Any, Any], Any]


class ActorPool:
    """A pool of actor handles; see Ray's ActorPool for the full contract."""

    def __init__(self, actors: Iterable[Any]) -> None:
        self._idle_actors = list(actors)
        self._future_to_actor: dict[Any, tuple[int, Any]] = {}  # ref -> (task index, actor)
        self._index_to_future: dict[int, Any] = {}
        self._next_task_index = 0
        self._next_return_index = 0
        self._pending_submits: deque[tuple[Fn, Any]] = deque()

    def map(self, fn: Fn, values: Iterable[Any]) -> Iterator[Any]:
        """Results of fn over values, in the order of values (lazily, as they finish)."""
        self._drain_finished()
        for v in values:
            self.submit(fn, v)

        def results() -> Iterator[Any]:
            while self.has_next():
                yield self.get_next()

        return results()

    def map_unordered(self, fn: Fn, values: Iterable[Any]) -> Iterator[Any]:
        """Results of fn over values, in the order they finish."""
        self._drain_finished()
        for v in values:
            self.submit(fn, v)

        def results() -> Iterator[Any]:
            while self.has_next():
                yield self.get_next_unordered()

        return results()

    def _drain_finished(self) -> None:
        # results left from earlier submits would mix with this map's: drop the ready ones
        while self.has_next():
            try:
                self.get_next(timeout=0, ignore_if_timedout=True)
            except TimeoutError:
                break

    def submit(self, fn: Fn, value: Any) -> None:
        """Run fn(actor, value) on an idle actor, or queue it until one is free."""
        if self._idle_actors:
            actor = self._idle_actors.pop()
            ref = fn(actor, value)
            self._future_to_actor[ref] = (self._next_task_index, actor)
            self._index_to_future[self._next_task_index] = ref
            self._next_task_index += 1
        else:
            self._pending_submits.append((fn, value))

    def has_next(self) -> bool:
        """Whether some submitted call has a result still to collect."""
        return bool(self._future_to_actor) or bool(self._pending_submits)

    def get_next(self, timeout: float | None = None, ignore_if_timedout: bool = False) -> Any:
        """The next result in submission order; TimeoutError if it is not ready in time."""
        if not self.has_next():
            raise StopIteration("No more results to get")
        if self._next_return_index >= self._next_task_index:
            raise ValueError("It is not allowed to call get_next() after get_next_unordered().")
        ref = self._index_to_future[self._next_return_index]
        timed_out = False
        if timeout is not None:
            ready, _ = zmesh.wait([ref], timeout=timeout)
            timed_out = not ready
        if timed_out and not ignore_if_timedout:
            raise TimeoutError(f"Timed out waiting for result of task {self._next_return_index}")
        if timed_out:
            return None
        del self._index_to_future[self._next_return_index]
        self._next_return_index += 1
        _, actor = self._future_to_actor.pop(ref)
        self._return_actor(actor)
        return zmesh.get(ref)

    def get_next_unordered(self, timeout: float | None = None,
                           ignore_if_timedout: bool = False) -> Any:
        """Any finished result (the first to finish); TimeoutError if none is in time."""
        if not self.has_next():
            raise StopIteration("No more results to get")
        ready, _ = zmesh.wait(list(self._future_to_actor), num_returns=1, timeout=timeout)
        if not ready:
            if ignore_if_timedout:
                return None
            raise TimeoutError("Timed out waiting for result")
        ref = ready[0]
        index, actor = self._future_to_actor.pop(ref)
        self._index_to_future.pop(index, None)
        self._next_return_index = max(self._next_return_index, index + 1)
        self._return_actor(actor)
        return zmesh.get(ref)

    def _return_actor(self, actor: Any) -> None:
        self._idle_actors.append(actor)
        if self._pending_submits:
            self.submit(*self._pending_submits.popleft())

    def has_free(self) -> bool:
        """Whether an actor is idle and no call is queued."""
        return bool(self._idle_actors) and not self._pending_submits

    def pop_idle(self) -> Any | None:
        """Remove an idle actor from the pool and return it (None if none is idle)."""
        if self.has_free():
            return self._idle_actors.pop()
        return None

    def push(self, actor: Any) -> None:
        """Add an actor to the pool (it takes a queued call at once, if any)."""
        busy = [a for _, a in self._future_to_actor.values()]
        if actor in self._idle_actors or actor in busy:
            raise ValueError("Actor already belongs to current ActorPool")
        self._return_actor(actor)
