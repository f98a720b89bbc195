"""zmesh.util.metrics as Ray's ray.util.metrics: names, tag keys, and what each kind records."""

from __future__ import annotations

import pytest

from zmesh.util import metrics


def test_counter_gauge_and_histogram_record_per_tag_values() -> None:
    c = metrics.Counter("unit_requests", "requests", tag_keys=("route",))
    c.inc(tags={"route": "/a"})
    c.inc(2.5, tags={"route": "/a"})
    c.inc(tags={"route": "/b"})
    g = metrics.Gauge("unit_queue", "queue length")
    g.set(3)
    g.set(7)
    h = metrics.Histogram("unit_latency", "seconds", boundaries=[0.1, 1.0])
    for v in (0.05, 0.5, 0.7, 5.0):
        h.observe(v)
    by_name = {r["name"]: r for r in metrics.snapshot()}
    assert sorted(by_name["unit_requests"]["values"]) == [[["/a"], 3.5], [["/b"], 1.0]]
    assert by_name["unit_queue"]["values"] == [[[], 7.0]]
    # buckets <=0.1, <=1.0, +Inf, then sum and count
    assert by_name["unit_latency"]["values"] == [[[], [1.0, 2.0, 1.0, 6.25, 4.0]]]
    assert by_name["unit_latency"]["boundaries"] == [0.1, 1.0]


def test_default_tags_fill_in_and_unknown_or_missing_tags_are_refused() -> None:
    c = metrics.Counter("unit_tagged", tag_keys=("a", "b"))
    c.set_default_tags({"a": "x"})
    c.inc(tags={"b": "y"})
    assert next(r for r in metrics.snapshot() if r["name"] == "unit_tagged")["values"] == [
        [["x", "y"], 1.0]]
    with pytest.raises(ValueError, match="missing values for tags"):
        c.inc()
    with pytest.raises(ValueError, match="no tag keys"):
        c.inc(tags={"a": "x", "b": "y", "c": "z"})


def test_bad_names_negative_increments_and_bad_boundaries_are_errors() -> None:
    with pytest.raises(ValueError, match="metric name"):
        metrics.Counter("has space")
    with pytest.raises(ValueError, match="can only go up"):
        metrics.Counter("unit_up").inc(-1)
    with pytest.raises(ValueError, match="boundaries"):
        metrics.Histogram("unit_h", boundaries=[1.0, 0.5])
