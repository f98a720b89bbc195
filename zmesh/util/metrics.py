"""Metrics for user code, as Ray's `ray.util.metrics`: Counter, Gauge and Histogram.

A task or actor records values with `inc`, `set` and `observe`; its worker ships the
current values to its node about once a second, and `zmesh dashboard` exports them on
`/metrics` for Prometheus as `zmesh_<name>` with the tags as labels (plus the node and
worker pid). In a driver the values stay in the process (readable with `snapshot()`).
"""

from __future__ import annotations

import bisect
import re
import threading
from collections.abc import Sequence
from typing import Any

__all__ = ["Counter", "Gauge", "Histogram", "snapshot"]

_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_lock = threading.Lock()
_registry: dict[str, Metric] = {}


class Metric:
    """A named metric with tag keys; values are kept per combination of tag values."""

    kind = "metric"

    def __init__(self, name: str, description: str = "",
                 tag_keys: Sequence[str] | None = None) -> None:
        if not isinstance(name, str) or not _NAME.match(name):
            raise ValueError(f"metric name {name!r} must match [a-zA-Z_:][a-zA-Z0-9_:]*")
        keys = tuple(tag_keys or ())
        if not all(isinstance(k, str) for k in keys):
            raise TypeError(f"tag_keys must be strings, got {tag_keys!r}")
        self.name = name
        self.description = description
        self.tag_keys = keys
        self._default: dict[str, str] = {}
        self._values: dict[tuple[str, ...], Any] = {}
        with _lock:
            _registry[name] = self

    def set_default_tags(self, tags: dict[str, str]) -> None:
        """Tags used when a call gives none (Ray's set_default_tags)."""
        self._check(tags)
        self._default = dict(tags)

    def _key(self, tags: dict[str, str] | None) -> tuple[str, ...]:
        merged = {**self._default, **(tags or {})}
        self._check(merged)
        missing = [k for k in self.tag_keys if k not in merged]
        if missing:
            raise ValueError(f"metric {self.name!r}: missing values for tags {missing}")
        return tuple(str(merged[k]) for k in self.tag_keys)

    def _check(self, tags: dict[str, str]) -> None:
        unknown = set(tags) - set(self.tag_keys)
        if unknown:
            raise ValueError(f"metric {self.name!r} has no tag keys {sorted(unknown)}; "
                             f"declared: {list(self.tag_keys)}")

    def record(self) -> dict[str, Any]:
        with _lock:
            values = [[list(k), v if not isinstance(v, list) else list(v)]
                      for k, v in self._values.items()]
        return {"name": self.name, "kind": self.kind, "description": self.description,
                "tag_keys": list(self.tag_keys), "values": values, **self._extra()}

    def _extra(self) -> dict[str, Any]:
        return {}


class Counter(Metric):
    """A value that only goes up."""

    kind = "counter"

    def inc(self, value: float = 1.0, tags: dict[str, str] | None = None) -> None:
        if value < 0:
            raise ValueError(f"counter {self.name!r} can only go up, got inc({value})")
        key = self._key(tags)
        with _lock:
            self._values[key] = self._values.get(key, 0.0) + value


class Gauge(Metric):
    """A value that is set to the current reading."""

    kind = "gauge"

    def set(self, value: float, tags: dict[str, str] | None = None) -> None:
        key = self._key(tags)
        with _lock:
            self._values[key] = float(value)


class Histogram(Metric):
    """Observations counted into buckets with the given upper boundaries."""

    kind = "histogram"

    def __init__(self, name: str, description: str = "",
                 boundaries: Sequence[float] = (), tag_keys: Sequence[str] | None = None
                 ) -> None:
        bounds = [float(b) for b in boundaries]
        if not bounds or bounds != sorted(bounds) or bounds[0] <= 0:
            raise ValueError(f"histogram {name!r}: boundaries must be positive and increasing,"
                             f" got {list(boundaries)!r}")
        self.boundaries = bounds
        super().__init__(name, description, tag_keys)

    def observe(self, value: float, tags: dict[str, str] | None = None) -> None:
        key = self._key(tags)
        i = bisect.bisect_left(self.boundaries, value)
        with _lock:
            # [count per bucket..., +Inf bucket, sum, count]
            cur = self._values.get(key) or [0.0] * (len(self.boundaries) + 3)
            cur[i] += 1
            cur[-2] += value
            cur[-1] += 1
            self._values[key] = cur

    def _extra(self) -> dict[str, Any]:
        return {"boundaries": self.boundaries}


def snapshot() -> list[dict[str, Any]]:
    """Every metric defined in this process, with its current values."""
    with _lock:
        metrics = list(_registry.values())
    return [m.record() for m in metrics]


def defined() -> bool:
    """Whether this process defined any metric (a worker ships nothing otherwise)."""
    return bool(_registry)
