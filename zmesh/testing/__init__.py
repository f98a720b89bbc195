"""zmesh.testing."""

from zmesh.testing.cluster import Cluster, ClusterNode

__all__ = ["Cluster", "ClusterNode"]
