"""zmesh.testing: local clusters, a simulated mesh (`sim_mesh`), fault plans, histories and
checkers for testing programs.

`fault_plans` needs hypothesis (the `test` extra) and is imported on first use.
"""

from typing import Any

from zmesh.testing.cluster import Cluster, ClusterNode
from zmesh.testing.faults import (
    FaultPlan,
    FaultPlanError,
    KillActor,
    KillNode,
    KillOwner,
    KillWorker,
    LinkFault,
    Partition,
    Pause,
    SlowNode,
)
from zmesh.testing.history import History, HistoryViolation, Op, Violation
from zmesh.testing.sim_faults import SimFaults
from zmesh.testing.sim_kernel import SimDeadlock, SimKilled
from zmesh.testing.sim_mesh import LinkFaults, SimMesh, sim_mesh

__all__ = [
    "Cluster", "ClusterNode", "FaultPlan", "FaultPlanError", "History", "HistoryViolation",
    "KillActor", "KillNode", "KillOwner", "KillWorker", "LinkFault", "LinkFaults", "Op",
    "Partition", "Pause", "SimDeadlock", "SimFaults", "SimKilled", "SimMesh", "SlowNode",
    "Violation",
    "fault_plans", "fault_steps", "fault_times", "sim_mesh",
]


def __getattr__(name: str) -> Any:
    if name in ("fault_plans", "fault_steps", "fault_times"):
        from zmesh.testing import strategies

        return getattr(strategies, name)
    raise AttributeError(f"module 'zmesh.testing' has no attribute {name!r}")
