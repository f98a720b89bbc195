"""`as_completed` and `map_unordered`: results as they finish, as Ray's `ray.util` has them."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import zmesh

DEFAULT_CHUNK_SIZE = 10
DEFAULT_BACKPRESSURE_SIZE = 100


def _batch(refs: list[Any], chunk_size: int, yield_obj_refs: bool, **wait_kwargs: Any
           ) -> tuple[list[Any], list[Any]]:
    ready, rest = zmesh.wait(refs, num_returns=min(chunk_size, len(refs)), **wait_kwargs)
    if not ready and wait_kwargs.get("timeout") is not None:
        raise TimeoutError(f"no result was ready within {wait_kwargs['timeout']}s")
    return (ready if yield_obj_refs else zmesh.get(ready)), rest


def as_completed(refs: Sequence[Any], *, chunk_size: int = DEFAULT_CHUNK_SIZE,
                 yield_obj_refs: bool = False, **wait_kwargs: Any) -> Iterator[Any]:
    """Yield the values of refs (or the refs) as they become ready, up to chunk_size at once."""
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    pending = list(refs)
    while pending:
        done, pending = _batch(pending, chunk_size, yield_obj_refs, **wait_kwargs)
        yield from done


def map_unordered(fn: Any, items: Iterable[Any], *,
                  backpressure_size: int = DEFAULT_BACKPRESSURE_SIZE,
                  chunk_size: int = DEFAULT_CHUNK_SIZE, yield_obj_refs: bool = False,
                  **wait_kwargs: Any) -> Iterator[Any]:
    """Run the remote function `fn` on each item, at most backpressure_size at a time, and
    yield the results as they finish."""
    if not hasattr(fn, "remote"):
        raise TypeError(f"map_unordered needs a remote function, got {type(fn).__name__}")
    if chunk_size < 1 or backpressure_size < 1:
        raise ValueError("chunk_size and backpressure_size must be >= 1")
    pending: list[Any] = []
    for item in items:
        if len(pending) >= backpressure_size:
            done, pending = _batch(pending, chunk_size, yield_obj_refs, **wait_kwargs)
            yield from done
        pending.append(fn.remote(item))
    yield from as_completed(pending, chunk_size=chunk_size, yield_obj_refs=yield_obj_refs,
                            **wait_kwargs)
