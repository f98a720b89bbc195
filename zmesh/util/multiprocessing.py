"""`Pool`: the stdlib `multiprocessing.Pool` interface, run on zmesh actors (Ray's
`ray.util.multiprocessing.Pool`). Each pool process is an actor that ran `initializer`;
work travels in chunks, and errors re-raise the function's own exception.
"""

from __future__ import annotations

import itertools
import math
import threading
from collections.abc import Callable, Iterable, Iterator
from multiprocessing import TimeoutError
from typing import Any

import zmesh

__all__ = ["AsyncResult", "Pool", "TimeoutError"]


class _PoolActor:
    def __init__(self, initializer: Callable[..., Any] | None, initargs: tuple[Any, ...]) -> None:
        if initializer is not None:
            initializer(*initargs)

    def run_batch(self, func: Callable[..., Any], batch: list[Any], star: bool) -> list[Any]:
        if star:
            return [func(*args) for args in batch]
        return [func(arg) for arg in batch]

    def apply(self, func: Callable[..., Any], args: tuple[Any, ...],
              kwds: dict[str, Any]) -> Any:
        return func(*args, **kwds)


class AsyncResult:
    """The result of `apply_async`/`map_async`/`starmap_async`."""

    def __init__(self, refs: list[Any], single: bool, callback: Callable[[Any], Any] | None,
                 error_callback: Callable[[BaseException], Any] | None) -> None:
        self._refs = refs
        self._single = single
        self._done = threading.Event()
        self._value: Any = None
        self._error: BaseException | None = None
        threading.Thread(target=self._collect, args=(callback, error_callback),
                         name="zmesh-pool-result", daemon=True).start()

    def _collect(self, callback: Callable[[Any], Any] | None,
                 error_callback: Callable[[BaseException], Any] | None) -> None:
        try:
            chunks = zmesh.get(self._refs)
            self._value = chunks[0] if self._single else list(itertools.chain(*chunks))
        except BaseException as exc:  # noqa: BLE001 - handed to get() and error_callback
            self._error = exc
        self._done.set()
        if self._error is None and callback is not None:
            callback(self._value)
        elif self._error is not None and error_callback is not None:
            error_callback(self._error)

    def get(self, timeout: float | None = None) -> Any:
        """The result (or the function's exception); multiprocessing.TimeoutError if late."""
        if not self._done.wait(timeout):
            raise TimeoutError("the result was not ready in time")
        if self._error is not None:
            raise self._error
        return self._value

    def wait(self, timeout: float | None = None) -> None:
        """Wait until the result is ready or timeout passes."""
        self._done.wait(timeout)

    def ready(self) -> bool:
        """Whether the call completed."""
        return self._done.is_set()

    def successful(self) -> bool:
        """Whether the call completed without raising; ValueError if not ready yet."""
        if not self._done.is_set():
            raise ValueError("the result is not ready")
        return self._error is None


class Pool:
    """A pool of worker actors with the stdlib Pool's methods."""

    def __init__(self, processes: int | None = None,
                 initializer: Callable[..., Any] | None = None,
                 initargs: Iterable[Any] | None = None, maxtasksperchild: int | None = None,
                 context: Any = None, ray_address: str | None = None,
                 ray_remote_args: dict[str, Any] | None = None) -> None:
        if not zmesh.is_initialized():
            zmesh.init(address=ray_address)
        if processes is None:
            processes = max(1, int(zmesh.cluster_resources().get("CPU", 1)))
        if processes < 1:
            raise ValueError("Number of processes must be at least 1")
        from zmesh.api import remote

        cls = remote(_PoolActor).options(**(ray_remote_args or {"num_cpus": 1}))
        args = tuple(initargs or ())
        self._actors = [cls.remote(initializer, args) for _ in range(processes)]
        self._next = itertools.cycle(range(processes))
        self._closed = False
        self._results: list[Any] = []  # refs not yet known to be done, for join()

    def _check_running(self) -> None:
        if self._closed:
            raise ValueError("Pool not running")

    def _actor(self) -> Any:
        return self._actors[next(self._next)]

    def _chunks(self, func: Callable[..., Any], iterable: Iterable[Any], chunksize: int | None,
                star: bool) -> list[Any]:
        self._check_running()
        items = list(iterable)
        if chunksize is None:
            chunksize = max(1, math.ceil(len(items) / (len(self._actors) * 4)))
        if chunksize < 1:
            raise ValueError(f"chunksize must be >= 1, got {chunksize}")
        refs = [self._actor().run_batch.remote(func, items[i:i + chunksize], star)
                for i in range(0, len(items), chunksize)]
        self._track(refs)
        return refs

    def _track(self, refs: list[Any]) -> None:
        self._results = [r for r in self._results
                         if not zmesh.wait([r], timeout=0)[0]] + refs

    # -- the stdlib interface --------------------------------------------------------------
    def apply(self, func: Callable[..., Any], args: tuple[Any, ...] = (),
              kwds: dict[str, Any] | None = None) -> Any:
        """func(*args, **kwds) in a pool process; blocks for the result."""
        return self.apply_async(func, args, kwds).get()

    def apply_async(self, func: Callable[..., Any], args: tuple[Any, ...] = (),
                    kwds: dict[str, Any] | None = None,
                    callback: Callable[[Any], Any] | None = None,
                    error_callback: Callable[[BaseException], Any] | None = None
                    ) -> AsyncResult:
        """func(*args, **kwds) in a pool process; returns an AsyncResult."""
        self._check_running()
        ref = self._actor().apply.remote(func, tuple(args), dict(kwds or {}))
        self._track([ref])
        return AsyncResult([ref], True, callback, error_callback)

    def map(self, func: Callable[[Any], Any], iterable: Iterable[Any],
            chunksize: int | None = None) -> list[Any]:
        """[func(x) for x in iterable], computed in the pool, in order."""
        return self.map_async(func, iterable, chunksize).get()  # type: ignore[no-any-return]

    def map_async(self, func: Callable[[Any], Any], iterable: Iterable[Any],
                  chunksize: int | None = None, callback: Callable[[Any], Any] | None = None,
                  error_callback: Callable[[BaseException], Any] | None = None
                  ) -> AsyncResult:
        """map() that returns an AsyncResult."""
        return AsyncResult(self._chunks(func, iterable, chunksize, False), False, callback,
                           error_callback)

    def starmap(self, func: Callable[..., Any], iterable: Iterable[Iterable[Any]],
                chunksize: int | None = None) -> list[Any]:
        """[func(*args) for args in iterable], in order."""
        return self.starmap_async(func, iterable, chunksize).get()  # type: ignore[no-any-return]

    def starmap_async(self, func: Callable[..., Any], iterable: Iterable[Iterable[Any]],
                      chunksize: int | None = None,
                      callback: Callable[[Any], Any] | None = None,
                      error_callback: Callable[[BaseException], Any] | None = None
                      ) -> AsyncResult:
        """starmap() that returns an AsyncResult."""
        return AsyncResult(self._chunks(func, (tuple(a) for a in iterable), chunksize, True),
                           False, callback, error_callback)

    def imap(self, func: Callable[[Any], Any], iterable: Iterable[Any],
             chunksize: int = 1) -> Iterator[Any]:
        """Like map(), but yields results in order as they arrive."""
        refs = self._chunks(func, iterable, chunksize, False)

        def results() -> Iterator[Any]:
            for ref in refs:
                yield from zmesh.get(ref)

        return results()

    def imap_unordered(self, func: Callable[[Any], Any], iterable: Iterable[Any],
                       chunksize: int = 1) -> Iterator[Any]:
        """Like imap(), but yields results in the order they finish."""
        refs = self._chunks(func, iterable, chunksize, False)

        def results() -> Iterator[Any]:
            pending = list(refs)
            while pending:
                ready, pending = zmesh.wait(pending, num_returns=1)
                for ref in ready:
                    yield from zmesh.get(ref)

        return results()

    def close(self) -> None:
        """Accept no more work; the processes exit once it is done (see join)."""
        self._closed = True

    def terminate(self) -> None:
        """Stop the processes now; outstanding work is lost."""
        self._closed = True
        for actor in self._actors:
            zmesh.kill(actor)
        self._actors = []
        self._results = []

    def join(self) -> None:
        """Wait for the outstanding work, after close() or terminate()."""
        if not self._closed:
            raise ValueError("Pool is still running")
        if self._results:
            zmesh.wait(self._results, num_returns=len(self._results))
        for actor in self._actors:
            zmesh.kill(actor)
        self._actors = []
        self._results = []

    def __enter__(self) -> Pool:
        self._check_running()
        return self

    def __exit__(self, *exc: object) -> None:
        self.terminate()
