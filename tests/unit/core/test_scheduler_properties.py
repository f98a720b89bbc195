"""Invariants of the scheduler under random work, checked with hypothesis:
resources never go negative and all come back; waiting work never fits what is free;
GPU ids of whole-GPU work are never shared; placement groups release everything."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from scheduler_cluster import SimCluster

from zmesh.core.resources import SCALE
from zmesh.core.scheduler import LocalScheduler
from zmesh.core.scheduling import (
    DEFAULT,
    SPREAD,
    Dispatch,
    PGReady,
    PlacementGroupTarget,
    Request,
)

TOTAL = {"CPU": 4, "GPU": 2, "disk": 1.5}

shapes = st.sampled_from([
    None,
    {"CPU": 1},
    {"CPU": 0.1},
    {"CPU": 0.25, "GPU": 0.5},
    {"GPU": 1},
    {"GPU": 2},
    {"GPU": 0.3},
    {"CPU": 4},
    {"disk": 0.5},
    {"GPU": 3},  # infeasible on this node
])
ops = st.lists(
    st.one_of(
        st.tuples(st.just("submit"), shapes, st.sampled_from(["task", "actor"])),
        st.tuples(st.just("finish"), st.integers(0, 10**6), st.just("")),
        st.tuples(st.just("cancel"), st.integers(0, 10**6), st.just("")),
    ),
    max_size=60,
)


def check_node(s: LocalScheduler, running: dict[bytes, Dispatch]) -> None:
    free = s._free  # white-box: the fixed-point ledger itself
    assert all(v >= 0 for v in free.values()), free
    held: dict[str, int] = {}
    for d in running.values():
        if d.bundle is None:
            for k, v in d.resources.items():
                held[k] = held.get(k, 0) + v
    for group in s._bundles._groups.values():
        for bundle in group.values():
            assert all(v >= 0 for v in bundle.free.values())
            for k, v in bundle.total.items():
                held[k] = held.get(k, 0) + v
    for name, total in s._total.items():
        assert free.get(name, 0) + held.get(name, 0) == total, name
    whole = [i for d in running.values() if d.resources.get_amount("GPU") >= SCALE
             for i in d.gpu_ids]
    shared = {i for d in running.values() if 0 < d.resources.get_amount("GPU") < SCALE
              for i in d.gpu_ids}
    assert len(whole) == len(set(whole)) and not set(whole) & shared
    for work in s._waiting:
        if work.target is None:
            fits = s._fits_now(work)
        else:
            fits = s._bundles.fit(*work.target, work.place, work.hold) is not None
        assert not fits, f"{work.req.work_id!r} waits but fits"


@settings(max_examples=150, deadline=None)
@given(ops, st.randoms(use_true_random=False))
def test_one_node_keeps_its_books_under_any_sequence(sequence, rnd) -> None:
    s = LocalScheduler("a", TOTAL)
    running: dict[bytes, Dispatch] = {}
    n = 0

    def apply(decisions: list) -> None:
        for d in decisions:
            if isinstance(d, Dispatch):
                running[d.work_id] = d

    for op, arg, kind in sequence:
        if op == "submit":
            n += 1
            apply(s.submit(Request(n.to_bytes(4, "big"), kind=kind, resources=arg)))
        elif running or s.pending():
            ids = sorted(running) + [p.work_id for p in s.pending()]
            target = ids[arg % len(ids)]
            if op == "finish" and target in running:
                del running[target]
                apply(s.finish(target))
            elif op == "cancel":
                running.pop(target, None)
                apply(s.cancel(target))
        check_node(s, running)
    while running:
        target = rnd.choice(sorted(running))
        del running[target]
        apply(s.finish(target))
        check_node(s, running)
    assert s.available() == s.total()
    assert all(p.infeasible for p in s.pending())


cluster_ops = st.lists(
    st.one_of(
        st.tuples(st.just("task"), st.sampled_from("abc"), shapes, st.booleans()),
        st.tuples(st.just("pg"), st.sampled_from("abc"),
                  st.lists(st.sampled_from([{"CPU": 1}, {"GPU": 1}, {"CPU": 0.5, "GPU": 0.5}]),
                           min_size=1, max_size=3),
                  st.sampled_from(["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"])),
        st.tuples(st.just("in_pg"), st.sampled_from("abc"), st.integers(0, 99), st.integers(-1, 2)),
        st.tuples(st.just("finish"), st.integers(0, 10**6), st.none(), st.none()),
        st.tuples(st.just("remove"), st.sampled_from("abc"), st.integers(0, 99), st.none()),
        st.tuples(st.just("gossip"), st.none(), st.none(), st.none()),
    ),
    max_size=50,
)


@settings(max_examples=80, deadline=None)
@given(cluster_ops, st.randoms(use_true_random=False))
def test_a_three_node_cluster_gives_everything_back(sequence, rnd) -> None:
    sim = SimCluster({"a": {"CPU": 2, "GPU": 1}, "b": {"CPU": 2}, "c": {"CPU": 1, "GPU": 2}})
    groups: list[tuple[str, str]] = []
    for n, (op, x, y, z) in enumerate(sequence, start=1):
        wid = n.to_bytes(4, "big")
        if op == "task":
            sim.submit(x, Request(wid, resources=y, strategy=SPREAD if z else DEFAULT))
        elif op == "pg":
            sim.create_pg(x, f"pg{n}", y, z)
            groups.append((x, f"pg{n}"))
        elif op == "in_pg" and groups:
            _, pg = groups[y % len(groups)]
            sim.submit(x, Request(wid, resources={"CPU": 0.5}, strategy=PlacementGroupTarget(pg, z)))
        elif op == "finish" and sim.running:
            sim.finish(sorted(sim.running)[x % len(sim.running)])
        elif op == "remove" and groups:
            node, pg = groups.pop(y % len(groups))
            sim.remove_pg(node, pg)
        elif op == "gossip":
            sim.gossip()
            sim.answer_lookups()
        for s in sim.nodes.values():
            check_node(s, {w: d for w, (node, d) in sim.running.items() if node == s.node_id})
    ready = {d.pg_id for d in sim.pg_events if isinstance(d, PGReady)}
    for node, pg in groups:
        sim.remove_pg(node, pg)
    while sim.running:
        sim.finish(rnd.choice(sorted(sim.running)))
    for s in sim.nodes.values():
        assert s.available() == s.total(), (s.node_id, ready)
