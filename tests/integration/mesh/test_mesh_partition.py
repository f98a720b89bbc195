"""Cutting the links between two sets of nodes: each side declares the other dead; healing
the links brings the mesh back together."""

from __future__ import annotations

from runtime_fixtures import wait_until

from zmesh.errors import ZmeshError
from zmesh.testing import Cluster


def test_a_cut_mesh_splits_in_two_and_heals_back() -> None:
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    try:
        nodes = [cluster.head_node] + [cluster.add_node(num_cpus=1) for _ in range(3)]
        cluster.wait_for_nodes()
        left, right = nodes[:2], nodes[2:]
        ids = {n.node_id for n in nodes}

        def sees(node, expected) -> bool:  # type: ignore[no-untyped-def]
            try:
                return cluster.live_view(node) == {n.node_id for n in expected}
            except ZmeshError:
                return False

        cluster.cut(left, right)
        assert wait_until(lambda: all(sees(n, left) for n in left) and
                          all(sees(n, right) for n in right), timeout=10), \
            {n.node_id[:8]: sorted(i[:8] for i in cluster.live_view(n)) for n in nodes}
        cluster.heal()
        assert wait_until(lambda: all(cluster.live_view(n) == ids for n in nodes), timeout=20)
    finally:
        cluster.shutdown()
