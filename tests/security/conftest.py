"""Fixtures for tests/security: one secure mesh of one node per module, fresh mesh
credentials, and a ZeroMQ context for hand-made peers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import zmq

import zmesh
from zmesh.security.keys import ClusterCredentials
from zmesh.testing import Cluster


@pytest.fixture
def creds() -> ClusterCredentials:
    """Credentials of a mesh of their own (a token no running node knows)."""
    return ClusterCredentials.generate()


@pytest.fixture
def ctx() -> Iterator[zmq.Context[zmq.Socket[bytes]]]:
    """A ZeroMQ context for sockets made by hand, destroyed (linger 0) after the test."""
    context = zmq.Context()
    yield context
    context.destroy(linger=0)


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
