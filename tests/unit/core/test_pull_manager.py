"""PullManager, the sans-IO core of object pulls: flow control, merging, retries, failover."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zmesh.core.pull_manager import (
    Action,
    Begin,
    Complete,
    Fail,
    PullManager,
    Release,
    RequestChunk,
)
from zmesh.errors import ObjectLostError

KiB = 1 << 10


def requests(actions: list[Action]) -> list[RequestChunk]:
    return [a for a in actions if isinstance(a, RequestChunk)]


def start(pm: PullManager, oid: bytes, size: int, sources: list[str], waiter: object = "w",
          now: float = 0.0) -> tuple[int, list[Action]]:
    """Pull and start (the shell's allocation succeeded); returns the transfer id, actions."""
    (begin,) = pm.pull(oid, size, sources, waiter, now)
    assert isinstance(begin, Begin) and begin.size == size
    return begin.transfer_id, pm.started(begin.transfer_id, now)


def answer(pm: PullManager, req: RequestChunk, size: int, now: float = 0.0,
           source: str | None = None) -> tuple[bool, list[Action]]:
    return pm.on_chunk(source or req.source, req.transfer_id, req.offset, req.length, size, now)


def test_a_pull_asks_for_consecutive_chunks_up_to_the_window() -> None:
    pm = PullManager(chunk_size=4 * KiB, window=3, max_outstanding=10)
    _, actions = start(pm, b"x", 10 * KiB, ["A"])
    assert [(r.source, r.offset, r.length) for r in requests(actions)] == [
        ("A", 0, 4 * KiB), ("A", 4 * KiB, 4 * KiB), ("A", 8 * KiB, 2 * KiB)]


def test_each_answered_chunk_frees_a_slot_for_the_next() -> None:
    pm = PullManager(chunk_size=KiB, window=2, max_outstanding=10)
    _, first = start(pm, b"x", 5 * KiB, ["A"])
    assert [r.offset for r in requests(first)] == [0, KiB]
    write, more = answer(pm, requests(first)[0], 5 * KiB)
    assert write
    assert [r.offset for r in requests(more)] == [2 * KiB]
    assert pm.outstanding == 2


def test_the_last_chunk_completes_the_pull_and_releases_the_source() -> None:
    pm = PullManager(chunk_size=KiB, window=4)
    tid, actions = start(pm, b"x", 2 * KiB, ["A"], waiter="w1")
    reqs = requests(actions)
    assert answer(pm, reqs[1], 2 * KiB) == (True, [])
    write, done = answer(pm, reqs[0], 2 * KiB)
    assert write
    assert done == [Release("A", tid, b"x", True), Complete(tid, b"x", ("w1",))]
    assert pm.active == 0 and pm.outstanding == 0


def test_an_empty_object_completes_without_any_request() -> None:
    pm = PullManager()
    tid, actions = start(pm, b"e", 0, ["A"])
    assert actions == [Release("A", tid, b"e", True), Complete(tid, b"e", ("w",))]


def test_concurrent_pulls_of_one_object_share_one_transfer() -> None:
    pm = PullManager(chunk_size=KiB, window=8)
    tid, actions = start(pm, b"x", 2 * KiB, ["A"], waiter="first")
    assert pm.pull(b"x", 2 * KiB, ["A", "B"], "second", 0.0) == []
    assert pm.transfers_started == 1 and pm.pulls_merged == 1
    reqs = requests(actions)
    answer(pm, reqs[0], 2 * KiB)
    _, done = answer(pm, reqs[1], 2 * KiB)
    assert done[-1] == Complete(tid, b"x", ("first", "second"))


def test_a_second_pull_with_another_size_is_refused() -> None:
    pm = PullManager()
    start(pm, b"x", 100, ["A"])
    with pytest.raises(ValueError, match="being pulled as 100 bytes; a second pull says 7"):
        pm.pull(b"x", 7, ["A"], "w", 0.0)


def test_duplicate_late_and_foreign_chunks_are_not_written() -> None:
    pm = PullManager(chunk_size=KiB, window=2)
    _, actions = start(pm, b"x", 4 * KiB, ["A"])
    req = requests(actions)[0]
    assert answer(pm, req, 4 * KiB, source="B") == (False, [])  # not the source asked
    assert answer(pm, req, 4 * KiB)[0] is True
    assert answer(pm, req, 4 * KiB) == (False, [])  # the same chunk again
    assert pm.on_chunk("A", 999, 0, KiB, 4 * KiB, 0.0) == (False, [])  # unknown transfer
    wrong_length = requests(actions)[1]
    assert pm.on_chunk("A", wrong_length.transfer_id, wrong_length.offset, 10, 4 * KiB,
                       0.0) == (False, [])


def test_a_source_whose_copy_has_another_size_fails_the_pull() -> None:
    pm = PullManager(chunk_size=KiB)
    tid, actions = start(pm, b"x", 4 * KiB, ["A"])
    write, out = answer(pm, requests(actions)[0], 5 * KiB)
    assert not write
    assert isinstance(out[-1], Fail)
    assert "is 5120 bytes, but 4096 bytes were expected" in str(out[-1].error)


def test_flow_control_holds_back_transfers_beyond_the_global_limit() -> None:
    pm = PullManager(chunk_size=KiB, window=4, max_outstanding=5)
    _, a = start(pm, b"a", 10 * KiB, ["A"])
    _, b = start(pm, b"b", 10 * KiB, ["B"])
    assert len(requests(a)) == 4 and len(requests(b)) == 1
    assert pm.outstanding == 5
    # A slot freed by "a" goes round-robin: "b" wanted one too.
    _, more = answer(pm, requests(a)[0], 10 * KiB)
    assert [r.object_id for r in requests(more)] == [b"b"]


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 40), min_size=1, max_size=4),
    window=st.integers(1, 4),
    max_outstanding=st.integers(1, 6),
    picks=st.lists(st.integers(0, 10_000), max_size=200),
)
def test_outstanding_chunks_stay_within_the_window_and_every_byte_arrives_once(
    sizes: list[int], window: int, max_outstanding: int, picks: list[int]
) -> None:
    chunk = 3
    pm = PullManager(chunk_size=chunk, window=window, max_outstanding=max_outstanding)
    pending: list[RequestChunk] = []
    got: dict[int, list[tuple[int, int]]] = {}
    done: set[bytes] = set()

    def take(actions: list[Action]) -> None:
        for a in actions:
            if isinstance(a, RequestChunk):
                pending.append(a)
                got.setdefault(a.transfer_id, [])
            elif isinstance(a, Complete):
                done.add(a.object_id)
            assert not isinstance(a, Fail)
        by_transfer: dict[int, int] = {}
        for r in pending:
            by_transfer[r.transfer_id] = by_transfer.get(r.transfer_id, 0) + 1
        assert all(n <= window for n in by_transfer.values())
        assert len(pending) == pm.outstanding <= max_outstanding

    size_of = {}
    for i, size in enumerate(sizes):
        tid, actions = start(pm, bytes([i + 1]), size, ["S"])
        size_of[tid] = size
        take(actions)
    step = 0
    while pending:  # answer in an order hypothesis picks
        pick = picks[step] if step < len(picks) else 0
        step += 1
        req = pending.pop(pick % len(pending))
        write, actions = answer(pm, req, size_of[req.transfer_id])
        assert write
        got[req.transfer_id].append((req.offset, req.length))
        take(actions)
    assert done == {bytes([i + 1]) for i in range(len(sizes))}
    for tid, pieces in got.items():  # each byte asked for exactly once
        covered = sorted(pieces)
        assert sum(n for _, n in covered) == size_of[tid]
        assert all(a[0] + a[1] == b[0] for a, b in zip(covered, covered[1:], strict=False))


def test_a_stalled_source_is_asked_again_then_the_next_source_takes_over() -> None:
    pm = PullManager(chunk_size=KiB, window=2, stall_timeout=5.0, retries=1)
    tid, actions = start(pm, b"x", 3 * KiB, ["A", "B"])
    first = requests(actions)
    answer(pm, first[0], 3 * KiB, now=1.0)
    assert pm.tick(5.9) == []  # 4.9 s since the last progress
    again = pm.tick(6.0)
    assert [(r.source, r.offset) for r in requests(again)] == [("A", KiB), ("A", 2 * KiB)]
    moved = pm.tick(11.0)
    assert moved[0] == Release("A", tid, b"x", False)
    assert [(r.source, r.offset) for r in requests(moved)] == [("B", KiB), ("B", 2 * KiB)]
    # The old source's late answer is ignored; the new one's completes the pull.
    assert answer(pm, requests(again)[0], 3 * KiB, now=11.5) == (False, [])
    for r in requests(moved):
        _, out = answer(pm, r, 3 * KiB, now=12.0)
    assert out[-1] == Complete(tid, b"x", ("w",))


def test_a_source_that_stops_answering_fails_the_pull_with_object_lost() -> None:
    pm = PullManager(chunk_size=KiB, stall_timeout=1.0, retries=0)
    tid, actions = start(pm, b"x", 4 * KiB, ["A"], waiter="w")
    answer(pm, requests(actions)[0], 4 * KiB, now=0.5)
    out = pm.tick(2.0)
    assert out[0] == Release("A", tid, b"x", False)
    fail = out[-1]
    assert isinstance(fail, Fail) and fail.waiters == ("w",)
    assert isinstance(fail.error, ObjectLostError)
    assert "A stopped answering for 1 s (0 retries) after 1024 of 4096 bytes" in str(fail.error)
    assert pm.active == 0 and pm.outstanding == 0


def test_waiting_for_a_request_slot_is_not_a_stall() -> None:
    pm = PullManager(chunk_size=KiB, window=1, max_outstanding=1, stall_timeout=1.0, retries=0)
    _, a = start(pm, b"a", KiB, ["A"])
    _, b = start(pm, b"b", KiB, ["B"])
    assert requests(b) == []
    pm.tick(0.9)
    _, out = answer(pm, requests(a)[0], KiB, now=0.95)  # "a" done at 0.95: "b" gets the slot
    assert [r.object_id for r in requests(out)] == [b"b"]
    assert not any(isinstance(x, Fail) for x in pm.tick(1.5))


def test_a_dead_source_hands_its_outstanding_chunks_to_the_next_source() -> None:
    pm = PullManager(chunk_size=KiB, window=2)
    tid, actions = start(pm, b"x", 3 * KiB, ["A", "B"])
    answer(pm, requests(actions)[0], 3 * KiB)
    out = pm.source_died("A", 1.0)
    assert not any(isinstance(a, Release) for a in out)  # nobody left to tell
    assert [(r.source, r.offset) for r in requests(out)] == [("B", KiB), ("B", 2 * KiB)]


def test_the_pulls_from_a_source_are_named_before_its_death_moves_them_on() -> None:
    # (the shell ends them there if the source was only taken for dead and comes back)
    pm = PullManager(chunk_size=KiB, window=2)
    tid, actions = start(pm, b"x", 3 * KiB, ["A", "B"])
    other, _ = start(pm, b"y", KiB, ["B"])
    assert pm.pulling_from("A") == [(tid, b"x")]
    answer(pm, requests(actions)[0], 3 * KiB)
    pm.source_died("A", 1.0)
    assert pm.pulling_from("A") == []
    assert sorted(pm.pulling_from("B")) == sorted([(tid, b"x"), (other, b"y")])


def test_the_death_of_the_only_source_fails_the_pull_saying_how_far_it_got() -> None:
    pm = PullManager(chunk_size=KiB)
    _, actions = start(pm, b"x", 2 * KiB, ["A"])
    answer(pm, requests(actions)[0], 2 * KiB)
    (fail,) = pm.source_died("A", 1.0)
    assert isinstance(fail, Fail)
    assert "A died after sending 1024 of 2048 bytes" in str(fail.error)


def test_a_source_without_the_object_sends_the_pull_to_the_next_one() -> None:
    pm = PullManager(chunk_size=KiB)
    tid, actions = start(pm, b"x", KiB, ["A", "B"])
    out = pm.on_failed("A", tid, "not here", 0.0)
    assert out[0] == Release("A", tid, b"x", False)
    assert [r.source for r in requests(out)] == ["B"]
    out = pm.on_failed("B", tid, "not here either", 0.0)
    fail = out[-1]
    assert isinstance(fail, Fail) and isinstance(fail.error, ObjectLostError)
    assert "A: not here; B: not here either" in str(fail.error)


def test_cancel_fails_every_waiter_and_releases_the_source() -> None:
    pm = PullManager()
    tid, _ = start(pm, b"x", 100, ["A"], waiter="w1")
    pm.pull(b"x", 100, ["A"], "w2", 0.0)
    err = ObjectLostError("freed")
    assert pm.cancel(b"x", err) == [Release("A", tid, b"x", False),
                                    Fail(tid, b"x", ("w1", "w2"), err)]
    assert not pm.pulling(b"x") and pm.cancel(b"x", err) == []


def test_an_aborted_pull_that_never_started_releases_nobody() -> None:
    pm = PullManager()
    (begin,) = pm.pull(b"x", 10, ["A"], "w", 0.0)
    err = MemoryError("store full")
    assert pm.abort(begin.transfer_id, err) == [Fail(begin.transfer_id, b"x", ("w",), err)]


@pytest.mark.parametrize("kwargs, message", [
    ({"chunk_size": 0}, "chunk_size must be a positive int"),
    ({"window": -1}, "window must be a positive int"),
    ({"stall_timeout": 0}, "stall_timeout must be > 0"),
    ({"retries": -1}, "retries must be an int >= 0"),
])
def test_bad_settings_are_refused_by_name(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PullManager(**kwargs)  # type: ignore[arg-type]


def test_a_pull_without_sources_or_with_a_negative_size_is_refused() -> None:
    pm = PullManager()
    with pytest.raises(ValueError, match="names no source"):
        pm.pull(b"x", 1, [], "w", 0.0)
    with pytest.raises(ValueError, match="size must be an int >= 0"):
        pm.pull(b"x", -1, ["A"], "w", 0.0)
