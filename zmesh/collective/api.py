"""The collective API, as `ray.util.collective`: groups of actors (or tasks) that run
torch.distributed collectives among themselves, created from inside the members
(`init_collective_group`) or declared from the driver (`create_collective_group`)."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Sequence
from typing import Any

from zmesh.collective import rendezvous
from zmesh.collective.group import CollectiveGroup, check_dead_after
from zmesh.collective.types import BACKENDS, CollectiveError, ReduceOp

DEFAULT_DEAD_AFTER_S = 15.0
DEFAULT_TIMEOUT_S = 300.0

_groups: dict[str, CollectiveGroup] = {}
_lock = threading.Lock()


def _decl_key(group_name: str) -> str:
    return f"{rendezvous.KEY_PREFIX}{group_name}/declared"


def _check(world_size: int, rank: int, backend: str, group_name: str) -> None:
    if backend not in BACKENDS:
        raise ValueError(f"unknown collective backend {backend!r}; use one of {BACKENDS}")
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive int, got {world_size!r}")
    if not isinstance(rank, int) or not 0 <= rank < world_size:
        raise ValueError(f"rank must be an int in [0, {world_size}), got {rank!r}")
    if not isinstance(group_name, str) or not group_name or "/" in group_name:
        raise ValueError(f"group_name must be a non-empty str without '/', got {group_name!r}")


def init_collective_group(world_size: int, rank: int, backend: str = "gloo",
                          group_name: str = "default", *,
                          dead_after_s: float = DEFAULT_DEAD_AFTER_S,
                          timeout_s: float = DEFAULT_TIMEOUT_S, _nonce: str = "init") -> None:
    """Join group `group_name` as `rank` of `world_size`; blocks until every member joined.

    Call it in each member (an actor method, or a task). A member silent for
    `dead_after_s` seconds (at least MIN_DEAD_AFTER_S, 1 s) breaks the group; `timeout_s`
    bounds the rendezvous."""
    _check(world_size, rank, backend, group_name)
    dead_after_s = check_dead_after(dead_after_s)
    with _lock:
        if group_name in _groups and not _groups[group_name].broken:
            raise ValueError(f"this process is already in collective group {group_name!r}; "
                             f"destroy_collective_group({group_name!r}) first")
    store = rendezvous.open_store(group_name, _nonce, rank, world_size, timeout_s)
    group = CollectiveGroup(group_name, _nonce, rank, world_size, backend, store,
                            dead_after_s, timeout_s)
    with _lock:
        old = _groups.pop(group_name, None)
        _groups[group_name] = group
    if old is not None:
        old.close()


def create_collective_group(actors: Sequence[Any], world_size: int, ranks: Sequence[int],
                            backend: str = "gloo", group_name: str = "default") -> None:
    """Declare a group of actors from the driver; each joins on its first collective call
    (as Ray's declarative groups). `ranks[i]` is the rank of `actors[i]`."""
    if len(actors) != world_size or sorted(ranks) != list(range(world_size)):
        raise ValueError(f"create_collective_group needs {world_size} actors and ranks "
                         f"0..{world_size - 1}, got {len(actors)} actors and ranks {list(ranks)}")
    _check(world_size, 0, backend, group_name)
    ids = [getattr(a, "_actor_id", None) for a in actors]
    if not all(isinstance(i, bytes) for i in ids):
        raise TypeError("create_collective_group takes actor handles")
    from zmesh.util import kv

    decl = {"world_size": world_size, "backend": backend, "nonce": uuid.uuid4().hex,
            "ranks": {i.hex(): int(r) for i, r in zip(ids, ranks)}}  # type: ignore[union-attr]
    kv.kv_put(_decl_key(group_name), json.dumps(decl).encode())


def _group(group_name: str) -> CollectiveGroup:
    with _lock:
        group = _groups.get(group_name)
    if group is not None:
        return group
    from zmesh.runtime_context import get_runtime_context
    from zmesh.util import kv

    raw = kv.kv_get(_decl_key(group_name))
    actor_id = get_runtime_context().get_actor_id()
    if raw is None or actor_id is None:
        raise CollectiveError(f"collective group {group_name!r} is not initialized in this "
                              f"process: call init_collective_group() here or "
                              f"create_collective_group() from the driver first")
    decl = json.loads(raw)
    rank = decl["ranks"].get(actor_id)
    if rank is None:
        raise CollectiveError(f"this actor is not a member of collective group {group_name!r}")
    init_collective_group(decl["world_size"], rank, decl["backend"], group_name,
                          _nonce=decl["nonce"])
    with _lock:
        return _groups[group_name]


def destroy_collective_group(group_name: str = "default") -> None:
    """Leave the group here; the other members' collectives fail from now on."""
    with _lock:
        group = _groups.pop(group_name, None)
    if group is None:
        return
    group.close()
    if group.rank == 0:
        rendezvous.forget(group_name, group.nonce)


def is_group_initialized(group_name: str = "default") -> bool:
    """True when this process is a live member of the group."""
    with _lock:
        group = _groups.get(group_name)
    return group is not None and not group.broken


def _member(group_name: str) -> CollectiveGroup | None:
    try:
        return _group(group_name)  # a declared group is joined on first use
    except CollectiveError:
        return None


def get_rank(group_name: str = "default") -> int:
    """This process's rank in the group (-1 when not a member)."""
    group = _member(group_name)
    return -1 if group is None else group.rank


def get_collective_group_size(group_name: str = "default") -> int:
    """The group's world size (-1 when not a member)."""
    group = _member(group_name)
    return -1 if group is None else group.world_size


# -- collectives -------------------------------------------------------------------------------
# Each looks its group up with one dict read (atomic under the GIL; _group() only on a miss)
# and hands torch's bound method to CollectiveGroup.run: what a training loop calls per step
# stays within a few Python frames of a plain `pg.allreduce([t]).wait()`.
def allreduce(tensor: Any, group_name: str = "default", op: ReduceOp = ReduceOp.SUM) -> None:
    """Combine `tensor` across the group, in place on every member."""
    g = _groups.get(group_name) or _group(group_name)
    opts = _ALLREDUCE_OPTIONS.get(id(op)) or _reduce_options(_ALLREDUCE_OPTIONS, "Allreduce", op)
    g.run("allreduce", g.pg.allreduce, [tensor], opts)


# torch's options by id of a ReduceOp member (members live for good, so their ids are never
# reused; an Enum's __hash__ is Python code), made once: torch only reads them.
_ALLREDUCE_OPTIONS: dict[int, Any] = {}
_REDUCE_OPTIONS: dict[tuple[int, int], Any] = {}
_REDUCE_SCATTER_OPTIONS: dict[int, Any] = {}
_BROADCAST_OPTIONS: dict[int, Any] = {}


def _reduce_options(cache: dict[Any, Any], kind: str, op: ReduceOp, root: int = -1) -> Any:
    """Make, keep and return torch's `{kind}Options` for `op` (and `root`, for reduce)."""
    import torch.distributed as dist

    if not isinstance(op, ReduceOp):
        raise TypeError(f"op must be a zmesh.collective.ReduceOp (SUM, PRODUCT, MIN, MAX), "
                        f"got {op!r}")
    opts = getattr(dist, f"{kind}Options")()
    opts.reduceOp = op.to_torch()
    if root >= 0:
        opts.rootRank = root
        cache[(id(op), root)] = opts
    else:
        cache[id(op)] = opts
    return opts


def reduce(tensor: Any, dst_rank: int = 0, group_name: str = "default",
           op: ReduceOp = ReduceOp.SUM) -> None:
    """Combine `tensor` across the group into `dst_rank`'s tensor."""
    g = _groups.get(group_name) or _group(group_name)
    root = _rank_in(g, dst_rank, "dst_rank")
    opts = _REDUCE_OPTIONS.get((id(op), root)) or _reduce_options(_REDUCE_OPTIONS, "Reduce",
                                                                  op, root)
    g.run("reduce", g.pg.reduce, [tensor], opts)


def broadcast(tensor: Any, src_rank: int = 0, group_name: str = "default") -> None:
    """Copy `src_rank`'s tensor into every member's `tensor`."""
    g = _groups.get(group_name) or _group(group_name)
    root = _rank_in(g, src_rank, "src_rank")
    opts = _BROADCAST_OPTIONS.get(root)
    if opts is None:
        import torch.distributed as dist

        opts = _BROADCAST_OPTIONS[root] = dist.BroadcastOptions()
        opts.rootRank = root
    g.run("broadcast", g.pg.broadcast, [tensor], opts)


def allgather(tensor_list: list[Any], tensor: Any, group_name: str = "default") -> None:
    """Fill `tensor_list[r]` with rank r's `tensor`, on every member."""
    g = _groups.get(group_name) or _group(group_name)
    if len(tensor_list) != g.world_size:
        raise ValueError(f"allgather needs a list of {g.world_size} tensors, got "
                         f"{len(tensor_list)}")
    g.run("allgather", g.pg.allgather, [tensor_list], [tensor])


def reduce_scatter(tensor: Any, tensor_list: list[Any], group_name: str = "default",
                   op: ReduceOp = ReduceOp.SUM) -> None:
    """Combine `tensor_list` across the group; rank r gets the r-th result in `tensor`."""
    g = _groups.get(group_name) or _group(group_name)
    if len(tensor_list) != g.world_size:
        raise ValueError(f"reduce_scatter needs a list of {g.world_size} tensors, got "
                         f"{len(tensor_list)}")
    opts = _REDUCE_SCATTER_OPTIONS.get(id(op)) or _reduce_options(_REDUCE_SCATTER_OPTIONS,
                                                                  "ReduceScatter", op)
    g.run("reduce_scatter", g.pg.reduce_scatter, [tensor], [tensor_list], opts)


def send(tensor: Any, dst_rank: int, group_name: str = "default") -> None:
    """Send `tensor` to `dst_rank` (which calls recv)."""
    g = _groups.get(group_name) or _group(group_name)
    g.run("send", g.pg.send, [tensor], _rank_in(g, dst_rank, "dst_rank"), 0)


def recv(tensor: Any, src_rank: int, group_name: str = "default") -> None:
    """Receive into `tensor` what `src_rank` sends."""
    g = _groups.get(group_name) or _group(group_name)
    g.run("recv", g.pg.recv, [tensor], _rank_in(g, src_rank, "src_rank"), 0)


def barrier(group_name: str = "default") -> None:
    """Wait until every member reached the barrier."""
    g = _groups.get(group_name) or _group(group_name)
    g.run("barrier", g.pg.barrier)


def _rank_in(g: CollectiveGroup, rank: int, what: str) -> int:
    if not isinstance(rank, int) or not 0 <= rank < g.world_size:
        raise ValueError(f"{what} must be a rank of group {g.name!r} (0..{g.world_size - 1}), "
                         f"got {rank!r}")
    return rank
