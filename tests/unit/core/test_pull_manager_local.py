"""PullManager's local-copy path: a pull from a node on this machine copies its file, and
anything that goes wrong there falls back to chunks from the same source."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from zmesh.core.pull_manager import (
    Action,
    Begin,
    Complete,
    CopyLocal,
    Fail,
    PullManager,
    Release,
    RequestChunk,
)
from zmesh.errors import ObjectLostError

KiB = 1 << 10


def start_local(pm: PullManager, oid: bytes, size: int, sources: list[str],
                now: float = 0.0) -> tuple[int, list[Action]]:
    (begin,) = pm.pull(oid, size, sources, "w", now, local=True)
    assert isinstance(begin, Begin)
    actions = pm.started(begin.transfer_id, now)
    pm.validate()
    return begin.transfer_id, actions


def test_a_local_pull_asks_for_a_local_copy_and_no_chunk() -> None:
    pm = PullManager(chunk_size=KiB)
    tid, actions = start_local(pm, b"x", 10 * KiB, ["A", "B"])
    assert actions == [CopyLocal("A", tid, b"x", 10 * KiB)]
    assert pm.outstanding == 0 and pm.copying_locally(tid)


def test_a_done_local_copy_completes_and_releases_the_source() -> None:
    pm = PullManager(chunk_size=KiB)
    tid, _ = start_local(pm, b"x", 10 * KiB, ["A"])
    actions = pm.local_done(tid, 1.0)
    pm.validate()
    assert actions == [Release("A", tid, b"x", True), Complete(tid, b"x", ("w",))]
    assert pm.active == 0 and pm.local_copies == 1 and pm.local_fallbacks == 0
    assert pm.local_done(tid, 2.0) == []  # late duplicate: nothing


def test_a_failed_local_copy_falls_back_to_chunks_from_the_same_source() -> None:
    pm = PullManager(chunk_size=4 * KiB, window=2)
    tid, _ = start_local(pm, b"x", 10 * KiB, ["A", "B"])
    actions = pm.local_failed(tid, "wrong identity", 1.0)
    pm.validate()
    assert [(a.source, a.offset) for a in actions if isinstance(a, RequestChunk)] == [
        ("A", 0), ("A", 4 * KiB)]
    assert pm.local_fallbacks == 1 and not pm.copying_locally(tid)
    assert pm.local_done(tid, 2.0) == []  # a late local answer cannot complete it now


def test_chunks_are_not_written_while_copying_locally() -> None:
    pm = PullManager(chunk_size=KiB)
    tid, _ = start_local(pm, b"x", 2 * KiB, ["A"])
    assert pm.on_chunk("A", tid, 0, KiB, 2 * KiB, 0.0) == (False, [])


def test_a_silent_local_copy_falls_back_after_the_stall_timeout() -> None:
    pm = PullManager(chunk_size=KiB, stall_timeout=5.0)
    tid, _ = start_local(pm, b"x", 2 * KiB, ["A"])
    assert pm.tick(4.0) == []
    actions = pm.tick(5.0)
    pm.validate()
    assert [a.offset for a in actions if isinstance(a, RequestChunk)] == [0, KiB]
    assert pm.local_fallbacks == 1


def test_a_source_that_refuses_the_local_copy_moves_on_to_the_next_by_chunks() -> None:
    pm = PullManager(chunk_size=KiB, window=1)
    tid, _ = start_local(pm, b"x", 2 * KiB, ["A", "B"])
    actions = pm.on_failed("A", tid, "not held", 1.0)
    pm.validate()
    assert Release("A", tid, b"x", False) in actions
    assert [(a.source, a.offset) for a in actions if isinstance(a, RequestChunk)] == [("B", 0)]
    assert pm.local_fallbacks == 0


def test_a_source_dying_during_the_local_copy_fails_when_no_other_source() -> None:
    pm = PullManager(chunk_size=KiB)
    tid, _ = start_local(pm, b"x", 2 * KiB, ["A"])
    actions = pm.source_died("A", 1.0)
    pm.validate()
    (fail,) = [a for a in actions if isinstance(a, Fail)]
    assert isinstance(fail.error, ObjectLostError) and "A died" in str(fail.error)
    assert pm.local_done(tid, 2.0) == []


def test_a_merged_pull_shares_the_local_copy() -> None:
    pm = PullManager(chunk_size=KiB)
    tid, _ = start_local(pm, b"x", 2 * KiB, ["A"])
    assert pm.pull(b"x", 2 * KiB, ["B"], "w2", 0.0, local=True) == []
    (_, complete) = pm.local_done(tid, 1.0)
    assert isinstance(complete, Complete) and complete.waiters == ("w", "w2")


def test_an_empty_object_needs_no_local_copy() -> None:
    pm = PullManager()
    (begin,) = pm.pull(b"x", 0, ["A"], "w", 0.0, local=True)
    actions = pm.started(begin.transfer_id, 0.0)
    assert [type(a) for a in actions] == [Release, Complete]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["done", "failed", "chunk", "tick", "died", "refused",
                                           "cancel", "pull"]),
                          st.integers(0, 2)), max_size=30))
def test_any_order_of_local_and_chunk_events_keeps_the_invariants(
    events: list[tuple[str, int]]
) -> None:
    pm = PullManager(chunk_size=KiB, window=2, max_outstanding=3, stall_timeout=1.0, retries=0)
    size = 3 * KiB
    now = 0.0
    tids: dict[int, int] = {}
    asked: list[RequestChunk] = []
    finished: set[bytes] = set()

    def run(actions: list[Action]) -> None:
        for a in actions:
            if isinstance(a, Begin):
                tids[int(a.object_id[1:])] = a.transfer_id
                run(pm.started(a.transfer_id, now))
            elif isinstance(a, RequestChunk):
                asked.append(a)
            elif isinstance(a, (Complete, Fail)):
                finished.add(a.object_id)

    for kind, i in events:
        now += 0.6
        oid = b"o%d" % i
        tid = tids.get(i, -1)
        if kind == "pull":
            run(pm.pull(oid, size, ["A", "B"], kind, now, local=True))
        elif kind == "done":
            run(pm.local_done(tid, now))
        elif kind == "failed":
            run(pm.local_failed(tid, "no", now))
        elif kind == "chunk" and asked:
            r = asked.pop(0)
            run(pm.on_chunk(r.source, r.transfer_id, r.offset, r.length, size, now)[1])
        elif kind == "tick":
            run(pm.tick(now))
        elif kind == "died":
            run(pm.source_died("A", now))
        elif kind == "refused":
            run(pm.on_failed("A", tid, "no", now))
        elif kind == "cancel":
            run(pm.cancel(oid, ObjectLostError("freed")))
        pm.validate()
