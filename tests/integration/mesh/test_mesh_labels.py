"""Label selectors: work goes only to nodes whose labels match exactly."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import zmesh
from zmesh.testing import Cluster


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "labels": {"zone": "a"}})
    c.add_node(num_cpus=1, labels={"zone": "b"})
    c.wait_for_nodes()
    zmesh.init(address=c.address)
    yield c
    zmesh.shutdown()
    c.shutdown()


@zmesh.remote
def where() -> str:
    return zmesh.get_runtime_context().get_node_id()


@zmesh.remote
class Where:
    def node(self) -> str:
        return zmesh.get_runtime_context().get_node_id()


def node_labelled(cluster: Cluster, zone: str) -> str:
    for node in cluster.list_all_nodes():
        if (node.args.get("labels") or {}).get("zone") == zone:
            return node.node_id
    raise LookupError(zone)


def test_tasks_and_actors_run_only_where_the_labels_match(cluster: Cluster) -> None:
    b = node_labelled(cluster, "b")
    on_b = where.options(label_selector={"zone": "b"})
    assert set(zmesh.get([on_b.remote() for _ in range(4)], timeout=60)) == {b}
    actor = Where.options(label_selector={"zone": "b"}).remote()  # type: ignore[attr-defined]
    assert zmesh.get(actor.node.remote(), timeout=60) == b
    assert zmesh.get(where.options(label_selector={"zone": "a"}).remote(), timeout=60) == \
        node_labelled(cluster, "a")


def test_a_selector_no_node_matches_waits_and_says_why(cluster: Cluster) -> None:
    ref = where.options(label_selector={"zone": "nowhere"}).remote()
    with pytest.raises(zmesh.exceptions.GetTimeoutError):
        zmesh.get(ref, timeout=1.5)
    zmesh.cancel(ref)


def test_label_operators_are_refused_clearly() -> None:
    with pytest.raises(ValueError, match="only exact values"):
        where.options(label_selector={"zone": "!a"}).remote()
