"""zmesh.collective: torch.distributed collectives among actors, as `ray.util.collective`.

    import zmesh.collective as col
    col.create_collective_group(actors, world_size=2, ranks=[0, 1], backend="gloo",
                                group_name="g")      # from the driver, or in each member:
    col.init_collective_group(world_size=2, rank=r, backend="gloo", group_name="g")
    col.allreduce(tensor, group_name="g")           # in the members

Members meet through the mesh's user KV (rank 0 opens a store on a port the OS picks).
A member that dies breaks the group: the others' collectives raise CollectiveError within
seconds instead of hanging. gloo runs on CPU tensors, nccl on CUDA tensors.
"""

from zmesh.collective.api import (
    allgather,
    allreduce,
    barrier,
    broadcast,
    create_collective_group,
    destroy_collective_group,
    get_collective_group_size,
    get_rank,
    init_collective_group,
    is_group_initialized,
    recv,
    reduce,
    reduce_scatter,
    send,
)
from zmesh.collective.types import CollectiveError, ReduceOp

__all__ = [
    "CollectiveError",
    "ReduceOp",
    "allgather",
    "allreduce",
    "barrier",
    "broadcast",
    "create_collective_group",
    "destroy_collective_group",
    "get_collective_group_size",
    "get_rank",
    "init_collective_group",
    "is_group_initialized",
    "recv",
    "reduce",
    "reduce_scatter",
    "send",
]
