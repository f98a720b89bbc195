"""zmesh.collective among actors on CPU (gloo): every collective, both ways of forming a
group, the user KV it meets through, and a member's death failing the others' pending
collectives with CollectiveError instead of hanging them."""

from __future__ import annotations

import os

import pytest

import zmesh
from zmesh.util import kv

torch = pytest.importorskip("torch")


@zmesh.remote
class Member:
    def __init__(self, rank: int, world: int) -> None:
        self.rank = rank
        self.world = world

    def pid(self) -> int:
        return os.getpid()

    def join(self, name: str) -> bool:
        import zmesh.collective as col

        col.init_collective_group(self.world, self.rank, "gloo", name, dead_after_s=3.0)
        return col.is_group_initialized(name)

    def everything(self, name: str) -> dict:
        import zmesh.collective as col

        r, w = self.rank, self.world
        out: dict = {"rank": col.get_rank(name), "size": col.get_collective_group_size(name)}
        t = torch.full((3,), float(r + 1))
        col.allreduce(t, name)
        out["allreduce"] = t.tolist()
        t = torch.full((2,), float(r + 1))
        col.allreduce(t, name, op=col.ReduceOp.MAX)
        out["allreduce_max"] = t.tolist()
        t = torch.full((2,), float(r)) if r == 1 else torch.zeros(2)
        col.broadcast(t, src_rank=1, group_name=name)
        out["broadcast"] = t.tolist()
        parts = [torch.zeros(2) for _ in range(w)]
        col.allgather(parts, torch.full((2,), float(r)), name)
        out["allgather"] = [p.tolist() for p in parts]
        t = torch.zeros(1)
        col.reduce_scatter(t, [torch.full((1,), float(i + r)) for i in range(w)], name)
        out["reduce_scatter"] = t.tolist()
        t = torch.full((1,), float(r + 1))
        col.reduce(t, dst_rank=0, group_name=name)
        out["reduce_at_0"] = t.tolist() if r == 0 else None
        if r == 0:
            col.send(torch.arange(4.0), dst_rank=1, group_name=name)
        elif r == 1:
            got = torch.zeros(4)
            col.recv(got, src_rank=0, group_name=name)
            out["recv"] = got.tolist()
        col.barrier(name)
        return out

    def late_pair(self, name: str, late_s: float) -> list[list[float]]:
        """A recv whose sender comes late, then a send whose receiver does: each side
        waits longer than a wait slice (the sleep makes the peer late; it syncs nothing)."""
        import time

        import zmesh.collective as col

        got = []
        for step in range(2):
            sender = step  # rank 0 sends first, then rank 1
            t = torch.full((3,), float(step + 10)) if self.rank == sender else torch.zeros(3)
            if self.rank == (1 - step):  # the late one
                time.sleep(late_s)
            if self.rank == sender:
                col.send(t, dst_rank=1 - sender, group_name=name)
            else:
                col.recv(t, src_rank=sender, group_name=name)
                got.append(t.tolist())
        t = torch.ones(1)
        col.allreduce(t, name)  # the group is still whole
        got.append(t.tolist())
        return got

    def allreduce_error(self, name: str) -> str:
        import zmesh.collective as col

        try:
            col.allreduce(torch.ones(2), name)
        except col.CollectiveError as exc:
            return str(exc)
        return "no error"

    def ops_in_turn(self, name: str) -> dict:
        """Each reduce op and root twice, interleaved: torch's options are kept per op and
        root, so a mix-up would show as a wrong result on the second pass."""
        import zmesh.collective as col

        r, out = self.rank, {}
        for step in range(2):
            for op in (col.ReduceOp.SUM, col.ReduceOp.MAX, col.ReduceOp.MIN,
                       col.ReduceOp.PRODUCT):
                t = torch.full((2,), float(r + 2))
                col.allreduce(t, name, op=op)
                out[f"allreduce {op.name} {step}"] = t[0].item()
                t = torch.full((1,), float(r + 2))
                col.reduce(t, dst_rank=step, group_name=name, op=op)
                out[f"reduce {op.name} at {step}"] = t[0].item() if r == step else None
                t = torch.zeros(1)
                col.reduce_scatter(t, [torch.full((1,), float(r + 2))] * self.world, name,
                                   op=op)
                out[f"reduce_scatter {op.name} {step}"] = t[0].item()
            for src in (1, 0):
                t = torch.full((1,), float(r + 10))
                col.broadcast(t, src_rank=src, group_name=name)
                out[f"broadcast from {src} {step}"] = t[0].item()
        try:
            col.allreduce(torch.ones(1), name, op="sum")  # type: ignore[arg-type]
        except TypeError as exc:
            out["bad op"] = str(exc)
        t = torch.ones(1)
        col.allreduce(t, name)  # a bad argument leaves the group whole
        out["after"] = t[0].item()
        return out

    def leave(self, name: str) -> None:
        import zmesh.collective as col

        col.destroy_collective_group(name)


def check(results: list[dict], world: int) -> None:
    total = float(sum(range(1, world + 1)))
    for r, out in enumerate(results):
        assert out["rank"] == r and out["size"] == world
        assert out["allreduce"] == [total] * 3
        assert out["allreduce_max"] == [float(world)] * 2
        assert out["broadcast"] == [1.0, 1.0]
        assert out["allgather"] == [[float(i)] * 2 for i in range(world)]
        assert out["reduce_scatter"] == [float(sum(r + i for i in range(world)))]
    assert results[0]["reduce_at_0"] == [total]
    assert results[1]["recv"] == [0.0, 1.0, 2.0, 3.0]


def test_init_collective_group_from_inside_runs_every_collective(ray):
    members = [Member.remote(r, 3) for r in range(3)]
    assert ray.get([m.join.remote("inside") for m in members], timeout=120) == [True] * 3
    check(ray.get([m.everything.remote("inside") for m in members], timeout=120), 3)
    ray.get([m.leave.remote("inside") for m in members], timeout=60)


def test_create_collective_group_from_the_driver(ray):
    import zmesh.collective as col

    members = [Member.remote(r, 2) for r in range(2)]
    col.create_collective_group(members, world_size=2, ranks=[0, 1], backend="gloo",
                                group_name="declared")
    check(ray.get([m.everything.remote("declared") for m in members], timeout=120), 2)
    ray.get([m.leave.remote("declared") for m in members], timeout=60)


def test_each_reduce_op_and_root_gets_its_own_options(ray):
    members = [Member.remote(r, 2) for r in range(2)]
    assert ray.get([m.join.remote("ops") for m in members], timeout=120) == [True] * 2
    got = ray.get([m.ops_in_turn.remote("ops") for m in members], timeout=120)
    want = {"SUM": 5.0, "MAX": 3.0, "MIN": 2.0, "PRODUCT": 6.0}  # ranks hold 2 and 3
    for r, out in enumerate(got):
        for step in range(2):
            for op, value in want.items():
                assert out[f"allreduce {op} {step}"] == value
                assert out[f"reduce_scatter {op} {step}"] == value
                assert out[f"reduce {op} at {step}"] == (value if r == step else None)
            assert out[f"broadcast from 1 {step}"] == 11.0
            assert out[f"broadcast from 0 {step}"] == 10.0
        assert "op must be a zmesh.collective.ReduceOp" in out["bad op"]
        assert "'sum'" in out["bad op"]
        assert out["after"] == 2.0
    ray.get([m.leave.remote("ops") for m in members], timeout=60)


def test_send_and_recv_wait_for_a_late_peer(ray):
    """A send or recv outlasting a wait slice still completes (a gloo send/recv whose wait
    times out closes the pair, so they are not waited on in slices)."""
    from zmesh.collective.group import WAIT_SLICE_S

    members = [Member.remote(r, 2) for r in range(2)]
    assert ray.get([m.join.remote("late") for m in members], timeout=120) == [True] * 2
    got = ray.get([m.late_pair.remote("late", 4 * WAIT_SLICE_S) for m in members],
                  timeout=120)
    assert got[1] == [[10.0] * 3, [2.0]]  # rank 1 received step 0's, then the allreduce
    assert got[0] == [[11.0] * 3, [2.0]]
    ray.get([m.leave.remote("late") for m in members], timeout=60)


def test_a_member_that_dies_fails_the_others_pending_collective(ray):
    members = [Member.remote(r, 3) for r in range(3)]
    assert ray.get([m.join.remote("doomed") for m in members], timeout=120) == [True] * 3
    # ranks 0 and 1 enter an allreduce that rank 2 never joins: rank 2 is killed instead
    pending = [m.allreduce_error.remote("doomed") for m in members[:2]]
    ray.kill(members[2])
    errors = ray.get(pending, timeout=60)
    for err in errors:
        assert "group 'doomed'" in err and "destroyed" in err, err
    # the group stays broken for later calls too
    assert "destroyed" in ray.get(members[0].allreduce_error.remote("doomed"), timeout=30)


def test_collective_calls_outside_a_group_say_so(ray):
    import zmesh.collective as col

    with pytest.raises(col.CollectiveError, match="not initialized"):
        col.allreduce(torch.ones(1), "nowhere")
    with pytest.raises(ValueError, match="unknown collective backend"):
        col.init_collective_group(2, 0, backend="mpi", group_name="x")
    with pytest.raises(ValueError, match="rank must be"):
        col.init_collective_group(2, 5, group_name="x")


def test_user_kv_round_trip(ray):
    assert kv.kv_get("kvtest/a") is None
    assert kv.kv_put("kvtest/a", b"1") is True
    assert kv.kv_put("kvtest/a", b"2", overwrite=False) is False
    assert kv.kv_get("kvtest/a") == b"1"
    kv.kv_put("kvtest/b", b"x")
    assert kv.kv_list("kvtest/") == ["kvtest/a", "kvtest/b"]
    assert kv.kv_delete("kvtest/a") is True
    assert kv.kv_get("kvtest/a") is None
    with pytest.raises(zmesh.exceptions.GetTimeoutError):
        kv.kv_wait("kvtest/never", timeout=0.2)
    with pytest.raises(TypeError):
        kv.kv_put("kvtest/c", "not bytes")  # type: ignore[arg-type]
