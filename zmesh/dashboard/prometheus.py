"""The mesh's counters in Prometheus' text format, one series per node (label `node`).

prometheus_client is imported here only, so only the dashboard process loads it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

Family = CounterMetricFamily | GaugeMetricFamily | HistogramMetricFamily


class MeshCollector(Collector):
    """Turns the nodes' `metrics` answers into metric families at each scrape."""

    def __init__(self, read: Callable[[], list[dict[str, Any]]]) -> None:
        self._read = read

    def collect(self) -> Iterator[Family]:
        nodes = self._read()
        c = _Families()
        for n in nodes:
            node = n["node_id"]
            for name, count in n["submitted"].items():
                c.counter("tasks_submitted", "leases requested, by function", count,
                          node=node, name=name)
            for kind, name, count in n["finished"]:
                c.counter("tasks_finished", "tasks and actor calls finished ok", count,
                          node=node, kind=kind, name=name)
            for kind, name, count in n["failed"]:
                c.counter("tasks_failed", "tasks and actor calls that raised", count,
                          node=node, kind=kind, name=name)
            for kind, count in n["membership_events"].items():
                c.counter("membership_events", "membership changes seen", count,
                          node=node, kind=kind)
            c.counter("messages_received", "messages the node handled",
                      n["messages_received"], node=node)
            for key in ("queued", "infeasible", "leases", "workers", "idle_workers", "actors"):
                c.gauge(key, f"{key.replace('_', ' ')} on the node", n[key], node=node)
            for key, value in n["store"].items():
                if isinstance(value, (int, float)):
                    c.gauge(f"object_store_{key}", f"object store: {key}", value, node=node)
            for key, value in n["transfer"].items():
                if isinstance(value, (int, float)):
                    c.gauge(f"transfer_{key}", f"object transfer: {key}", value, node=node)
            for res, total in n["resources"].items():
                if not res.startswith("node:"):
                    c.gauge("resources_total", "resources of the node", total,
                            node=node, resource=res)
                    c.gauge("resources_available", "resources free now",
                            n["available"].get(res, 0.0), node=node, resource=res)
            for pid, records in n["user"].items():
                for rec in records:
                    _user(c, rec, node, pid)
        yield from c.families.values()


class _Families:
    def __init__(self) -> None:
        self.families: dict[str, Family] = {}

    def _family(self, cls: type, name: str, doc: str, labels: list[str]) -> Any:
        fam = self.families.get(name)
        if fam is None:
            fam = self.families[name] = cls(f"zmesh_{name}", doc, labels=labels)
        return fam

    def counter(self, metric: str, doc: str, value: float, **labels: str) -> None:
        fam = self._family(CounterMetricFamily, metric, doc, list(labels))
        fam.add_metric(list(labels.values()), value)

    def gauge(self, metric: str, doc: str, value: float, **labels: str) -> None:
        fam = self._family(GaugeMetricFamily, metric, doc, list(labels))
        fam.add_metric(list(labels.values()), value)


def _user(c: _Families, rec: dict[str, Any], node: str, pid: str) -> None:
    """One user metric (zmesh.util.metrics) of one worker."""
    keys = [*rec["tag_keys"], "node", "pid"]
    name, doc = rec["name"], rec["description"] or rec["name"]
    for tags, value in rec["values"]:
        labels = [*tags, node, pid]
        if rec["kind"] == "counter":
            c._family(CounterMetricFamily, name, doc, keys).add_metric(labels, value)
        elif rec["kind"] == "gauge":
            c._family(GaugeMetricFamily, name, doc, keys).add_metric(labels, value)
        else:
            bounds, counts = rec["boundaries"], value
            cumulative, buckets = 0.0, []
            for bound, n in zip([*map(str, bounds), "+Inf"], counts[:len(bounds) + 1]):
                cumulative += n
                buckets.append((bound, cumulative))
            c._family(HistogramMetricFamily, name, doc, keys).add_metric(
                labels, buckets, sum_value=counts[-2])


def exposition(read: Callable[[], list[dict[str, Any]]]) -> bytes:
    """The text a Prometheus scrape gets."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(MeshCollector(read))
    return generate_latest(registry)
