"""StoredOwners: which objects a node frees on its own when their owner dies."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from zmesh.core.stored_owners import RecentFrees, StoredOwners

A, B = b"a" * 20, b"b" * 20


def test_a_dead_owner_frees_its_objects_once() -> None:
    o = StoredOwners()
    o.note(A, "sim://n2/w1")
    o.note(B, "sim://n1/w2")
    assert o.owner_died("sim://n2/w1") == [A]
    assert o.owner_died("sim://n2/w1") == []
    assert o.owner_of(B) == "sim://n1/w2"
    o.validate()


def test_a_dead_node_frees_what_its_processes_and_itself_owned() -> None:
    o = StoredOwners()
    o.note(A, "sim://n2/w1")  # a process on n2
    o.note(B, "sim://n2")  # the node itself
    o.note(b"c" * 20, "sim://n20/w1")  # another node: its prefix is not n2's
    assert sorted(o.node_died("sim://n2", "sim://n2/")) == [A, B]
    assert len(o) == 1
    o.validate()


def test_a_freed_object_is_not_freed_again_and_an_unknown_owner_is_not_noted() -> None:
    o = StoredOwners()
    o.note(A, "x")
    o.forget([A])
    o.note(B, "")
    assert o.owner_died("x") == [] and len(o) == 0
    o.validate()


@given(st.lists(st.tuples(st.sampled_from(["note", "forget", "died", "node"]),
                          st.sampled_from([A, B, b"c" * 20]),
                          st.sampled_from(["", "ipc:///d1/w", "ipc:///d2/w", "tcp://h:1"]))))
def test_the_maps_agree_and_every_noted_object_is_freed_once(
        ops: list[tuple[str, bytes, str]]) -> None:
    o = StoredOwners()
    model: dict[bytes, str] = {}
    for op, oid, owner in ops:
        if op == "note":
            o.note(oid, owner)
            if owner:
                model[oid] = owner
        elif op == "forget":
            o.forget([oid])
            model.pop(oid, None)
        elif op == "died":
            freed = o.owner_died(owner)
            assert sorted(freed) == sorted(k for k, v in model.items() if v == owner)
            model = {k: v for k, v in model.items() if v != owner}
        else:
            freed = o.node_died("tcp://h:1", "ipc:///d1/")
            gone = {k for k, v in model.items() if v == "tcp://h:1" or v.startswith("ipc:///d1/")}
            assert sorted(freed) == sorted(gone)
            model = {k: v for k, v in model.items() if k not in gone}
        o.validate()
        assert {k: o.owner_of(k) for k in model} == model and len(o) == len(model)


def test_recent_frees_give_back_what_a_dead_holder_was_sent_lately_once() -> None:
    r = RecentFrees(kept_s=10.0, kept_max=3)
    r.sent("n2", [A], now=0.0)
    r.sent("n2", [B], now=5.0)
    r.sent("n1", [b"c" * 20], now=5.0)
    assert r.holder_died("n2", now=12.0) == [B]  # A was sent too long ago
    assert r.holder_died("n2", now=12.0) == []
    r.sent("n1", [A, B, b"d" * 20], now=6.0)  # at most 3 kept: the oldest goes
    assert r.holder_died("n1", now=6.0) == [A, B, b"d" * 20]
