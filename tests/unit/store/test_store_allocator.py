"""FreeListAllocator: page-aligned best fit with coalescing, checked by properties."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zmesh.store.arena import PAGE_SIZE, FreeListAllocator

CAPACITY = 64 * PAGE_SIZE

# An op is ("alloc", size) or ("free", index into the live allocations).
ops_strategy = st.lists(
    st.one_of(
        st.tuples(st.just("alloc"), st.integers(0, 20 * PAGE_SIZE)),
        st.tuples(st.just("free"), st.integers(0, 1000)),
    ),
    max_size=80,
)


def check_invariants(a: FreeListAllocator) -> None:
    allocs = sorted(a.allocations().items())
    free = a.free_blocks()
    pieces = sorted([(o, s, "a") for o, s in allocs] + [(o, s, "f") for o, s in free])
    pos = 0
    for offset, size, _ in pieces:
        assert offset == pos, f"gap or overlap at {pos}: next piece starts at {offset}"
        assert offset % PAGE_SIZE == 0 and size % PAGE_SIZE == 0 and size > 0
        pos += size
    assert pos == a.capacity
    for (o1, s1), (o2, _) in zip(free, free[1:]):
        assert o1 + s1 < o2, "adjacent free blocks were not coalesced"
    assert a.used == sum(s for _, s in allocs)
    assert a.free_bytes == sum(s for _, s in free)


@settings(max_examples=150, deadline=None)
@given(ops_strategy)
def test_allocations_never_overlap_and_frees_coalesce(ops: list[tuple[str, int]]) -> None:
    a = FreeListAllocator(CAPACITY)
    live: list[tuple[int, int]] = []
    for op, arg in ops:
        if op == "alloc":
            need = a.block_size(arg)
            fits = any(size >= need for _, size in a.free_blocks())
            offset = a.allocate(arg)
            assert (offset is not None) == fits
            if offset is not None:
                live.append((offset, need))
        elif live:
            offset, size = live.pop(arg % len(live))
            assert a.free(offset) == size
        check_invariants(a)
    for offset, _ in live:
        a.free(offset)
    assert a.free_blocks() == [(0, CAPACITY)]
    assert a.used == 0 and a.is_empty


def test_freeing_then_allocating_the_same_size_reuses_the_offset() -> None:
    a = FreeListAllocator(CAPACITY)
    first = a.allocate(3 * PAGE_SIZE)
    second = a.allocate(5 * PAGE_SIZE)
    assert second is not None
    a.free(second)
    assert a.allocate(5 * PAGE_SIZE) == second
    assert first == 0


def test_best_fit_takes_the_smallest_hole_that_fits() -> None:
    a = FreeListAllocator(CAPACITY)
    offs = [a.allocate(n * PAGE_SIZE) for n in (4, 1, 2, 1, 30)]
    assert None not in offs
    a.free(offs[0])  # a 4-page hole
    a.free(offs[2])  # a 2-page hole
    assert a.allocate(2 * PAGE_SIZE) == offs[2]
    assert a.allocate(PAGE_SIZE) == offs[0]


def test_sizes_round_up_to_whole_pages_and_zero_takes_one_page() -> None:
    a = FreeListAllocator(CAPACITY)
    assert a.allocate(0) == 0
    assert a.allocate(1) == PAGE_SIZE
    assert a.allocate(PAGE_SIZE + 1) == 2 * PAGE_SIZE
    assert a.used == 4 * PAGE_SIZE


def test_allocation_larger_than_the_largest_hole_returns_none() -> None:
    a = FreeListAllocator(4 * PAGE_SIZE)
    assert a.allocate(5 * PAGE_SIZE) is None
    assert a.used == 0


def test_free_of_an_offset_never_allocated_names_it() -> None:
    a = FreeListAllocator(CAPACITY)
    a.allocate(PAGE_SIZE)
    with pytest.raises(ValueError, match="offset 8192"):
        a.free(8192)


def test_capacity_must_be_page_aligned() -> None:
    with pytest.raises(ValueError, match="multiple of align"):
        FreeListAllocator(PAGE_SIZE + 1)


def test_negative_size_is_refused() -> None:
    with pytest.raises(ValueError, match=">= 0"):
        FreeListAllocator(CAPACITY).allocate(-1)
