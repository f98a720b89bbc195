"""Fixtures for tests/security: one secure mesh of one node per module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import zmesh
from zmesh.testing import Cluster


@pytest.fixture(scope="module")
def mesh() -> Iterator[Cluster]:
    """A one-node mesh (CURVE on, its own token); no driver connected."""
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1},
                      shutdown_at_exit=False)
    try:
        yield cluster
    finally:
        if zmesh.is_initialized():
            zmesh.shutdown()
        cluster.shutdown()
