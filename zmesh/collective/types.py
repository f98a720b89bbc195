"""Names shared by the collective API: reduce operations, backends and the group error."""

from __future__ import annotations

import enum
from typing import Any

from zmesh.errors import ZmeshError


class ReduceOp(enum.Enum):
    """How allreduce, reduce and reduce_scatter combine the members' tensors."""

    SUM = "sum"
    PRODUCT = "product"
    MIN = "min"
    MAX = "max"

    def to_torch(self) -> Any:
        import torch.distributed as dist

        return getattr(dist.ReduceOp, self.name)  # SUM, PRODUCT, MIN, MAX: torch's names


BACKENDS = ("gloo", "nccl")


class CollectiveError(ZmeshError):
    """A collective failed: a member died or stopped answering (the group is destroyed),
    or the group does not exist in this process."""
