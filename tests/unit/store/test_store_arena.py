"""Arena: segment files grown lazily within the budget, space reused, files removed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from zmesh.store.arena import PAGE_SIZE, RESERVE_PIECE, Arena

MiB = 1 << 20


def files(d: Path) -> list[str]:
    return sorted(os.listdir(d))


def test_freeing_then_allocating_the_same_size_reuses_segment_and_offset(tmp_path: Path) -> None:
    arena = Arena(str(tmp_path), 8 * MiB, segment_size=2 * MiB)
    first = arena.allocate(300_000)
    assert first is not None
    before = files(tmp_path)
    arena.free(*first)
    assert arena.allocate(300_000) == first
    assert files(tmp_path) == before
    arena.close()


def test_segments_are_made_only_when_needed(tmp_path: Path) -> None:
    arena = Arena(str(tmp_path), 16 * MiB, segment_size=2 * MiB)
    assert files(tmp_path) == []
    arena.allocate(MiB)
    arena.allocate(MiB)
    assert len(files(tmp_path)) == 1
    arena.allocate(MiB)
    assert len(files(tmp_path)) == 2
    arena.close()


def test_new_segments_grow_geometrically_up_to_the_maximum(tmp_path: Path) -> None:
    arena = Arena(str(tmp_path), 64 * MiB, segment_size=2 * MiB, max_segment_size=8 * MiB)
    for _ in range(7):
        assert arena.allocate(2 * MiB) is not None
    sizes = [arena.segment_size(s) for s in arena.segments]
    assert sizes == [2 * MiB, 2 * MiB, 4 * MiB, 8 * MiB]
    arena.close()


def test_segment_files_never_exceed_capacity(tmp_path: Path) -> None:
    capacity = 5 * MiB + 3 * PAGE_SIZE
    arena = Arena(str(tmp_path), capacity, segment_size=2 * MiB)
    while arena.allocate(700_000) is not None:
        pass
    assert arena.segment_bytes <= capacity
    assert sum(os.path.getsize(tmp_path / f) for f in files(tmp_path)) == arena.segment_bytes
    arena.close()


def test_an_object_larger_than_a_segment_gets_a_segment_that_holds_it(tmp_path: Path) -> None:
    arena = Arena(str(tmp_path), 32 * MiB, segment_size=2 * MiB)
    got = arena.allocate(5 * MiB + 1)
    assert got is not None
    assert arena.segment_size(got[0]) >= 5 * MiB + 1
    arena.close()


def test_empty_segments_are_traded_for_one_large_enough(tmp_path: Path) -> None:
    removed: list[str] = []
    arena = Arena(str(tmp_path), 6 * MiB, segment_size=2 * MiB, on_segment_removed=removed.append)
    small = [arena.allocate(2 * MiB) for _ in range(3)]
    assert arena.allocate(4 * MiB) is None
    for got in small[:2]:
        assert got is not None
        arena.free(*got)
    big = arena.allocate(4 * MiB)
    assert big is not None
    assert sorted(removed) == sorted(g[0] for g in small[:2] if g is not None)
    assert big[0] not in removed, "segment names are never reused"
    assert arena.segment_bytes == 6 * MiB
    arena.close()


def test_allocation_that_cannot_fit_returns_none_without_new_files(tmp_path: Path) -> None:
    arena = Arena(str(tmp_path), 4 * MiB, segment_size=4 * MiB)
    assert arena.allocate(3 * MiB) is not None
    before = files(tmp_path)
    assert arena.allocate(2 * MiB) is None
    assert files(tmp_path) == before
    arena.close()


def test_close_removes_every_segment_file(tmp_path: Path) -> None:
    arena = Arena(str(tmp_path), 16 * MiB, segment_size=2 * MiB)
    for _ in range(5):
        arena.allocate(MiB + 1)
    assert files(tmp_path)
    arena.close()
    assert files(tmp_path) == []


def test_bad_sizes_are_refused_with_their_value() -> None:
    with pytest.raises(ValueError, match="capacity"):
        Arena("/nonexistent", 100)
    with pytest.raises(ValueError, match="segment_size"):
        Arena("/nonexistent", 8 * MiB, segment_size=1000)


@pytest.fixture
def fallocates(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """(offset, length) of every posix_fallocate the arena makes."""
    calls: list[tuple[int, int]] = []
    real = os.posix_fallocate

    def recording(fd: int, offset: int, length: int) -> None:
        calls.append((offset, length))
        real(fd, offset, length)

    monkeypatch.setattr(os, "posix_fallocate", recording)
    return calls


def test_a_new_segment_is_reserved_piece_by_piece_as_allocations_need_it(
        tmp_path: Path, fallocates: list[tuple[int, int]]) -> None:
    # One posix_fallocate of a whole 1 GiB segment held the node's loop for ~0.3 s (seconds
    # on a busy machine): long enough for other members to declare the node dead.
    arena = Arena(str(tmp_path), 256 * MiB, segment_size=64 * MiB)
    got = arena.allocate(40 * MiB)
    assert got is not None
    assert fallocates == [], "allocate only hands out space"
    segment, offset = got
    assert not arena.reserve_step(segment, offset, 40 * MiB, budget=1)
    assert fallocates == [(0, RESERVE_PIECE)], "one piece per step once over the budget"
    while not arena.reserve_step(segment, offset, 40 * MiB, budget=1):
        pass
    assert all(length <= RESERVE_PIECE for _, length in fallocates)
    covered = sum(length for _, length in fallocates)
    assert 40 * MiB <= covered < 40 * MiB + RESERVE_PIECE, "the range and no more"
    arena.reserve(segment, offset, 40 * MiB)
    assert covered == sum(length for _, length in fallocates), "each piece once"
    arena.close()


def test_reserving_outside_a_segment_is_refused(tmp_path: Path) -> None:
    arena = Arena(str(tmp_path), 16 * MiB, segment_size=4 * MiB)
    got = arena.allocate(MiB)
    assert got is not None
    with pytest.raises(ValueError, match="outside segment"):
        arena.reserve(got[0], 3 * MiB, 2 * MiB)
    with pytest.raises(ValueError, match="no segment"):
        arena.reserve("seg-999999", 0, 1)
    arena.close()
