"""The placement-group all-reduce example on a mesh: its STRICT_PACK group of 4 bundles only
fits on a node other than the one its driver joins, so bundles and actors live there."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from runtime_fixtures import wait_until

from zmesh.testing import Cluster

pytest.importorskip("torch")
pytest.importorskip("torch.distributed")

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "placement_group_allreduce.py"


def test_allreduce_example_runs_in_a_group_reserved_on_another_node() -> None:
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    try:
        big = cluster.add_node(num_cpus=4)
        proc = subprocess.run([sys.executable, str(EXAMPLE), "--address", cluster.address],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
        assert "gradients of 'net.0.weight' agree on 2 ranks" in proc.stdout
        assert "agree on 2 ranks" in proc.stdout.split("group A:")[1]
        # every bundle was released on the node that held them once the example ended
        def big_node_free() -> bool:
            rows = {r["NodeID"]: r for r in cluster.query(big, "nodes")}
            return bool(rows[big.node_id]["Available"].get("CPU", 0.0) == 4.0)

        assert wait_until(big_node_free, timeout=10)
    finally:
        cluster.shutdown()
