"""The tensor transport's warm receive pool: a block is reused only after every tensor (and
view) that lent it is gone, never while the user still holds it; the cap and empty_cache
bound what it keeps."""

from __future__ import annotations

import gc

import pytest

from zmesh.tensor_transport.pool import POOL_MIN_BYTES, RecvPool

torch = pytest.importorskip("torch")

BIG = [POOL_MIN_BYTES // 4]  # float32 elements: one pooled block


def test_a_held_tensor_is_never_reused_and_a_dropped_one_is():
    pool = RecvPool(cap_bytes=1 << 30)
    a = pool.empty(BIG, torch.float32)
    a.fill_(1.0)
    b = pool.empty(BIG, torch.float32)  # a is held: b must be other memory
    assert b.data_ptr() != a.data_ptr() and pool.reused == 0
    b.fill_(2.0)
    assert float(a.sum()) == BIG[0]
    ptr = a.data_ptr()
    view = a[10:20]  # a view keeps the memory lent too
    del a
    gc.collect()
    c = pool.empty(BIG, torch.float32)
    assert c.data_ptr() != ptr and pool.reused == 0
    del view
    gc.collect()
    d = pool.empty(BIG, torch.float32)
    assert d.data_ptr() == ptr and pool.reused == 1
    assert d.shape == torch.Size(BIG) and d.dtype == torch.float32


def test_shapes_dtypes_and_small_tensors():
    pool = RecvPool(cap_bytes=1 << 30)
    t = pool.empty([512, 1024], torch.bfloat16)
    assert t.shape == (512, 1024) and t.dtype == torch.bfloat16 and t.is_contiguous()
    small = pool.empty([3], torch.int64)  # below the pool's threshold: plain memory
    assert small.shape == (3,) and small.dtype == torch.int64
    del t, small
    gc.collect()
    assert pool.free_bytes == 512 * 1024 * 2


def test_the_cap_and_empty_cache_bound_what_is_kept():
    pool = RecvPool(cap_bytes=POOL_MIN_BYTES)
    tensors = [pool.empty(BIG, torch.float32) for _ in range(3)]
    del tensors
    gc.collect()
    assert pool.free_bytes == POOL_MIN_BYTES  # one block kept, the others released
    assert pool.clear() == POOL_MIN_BYTES and pool.free_bytes == 0
    off = RecvPool(cap_bytes=0)
    t = off.empty(BIG, torch.float32)
    del t
    gc.collect()
    assert off.free_bytes == 0


def test_a_block_that_fits_the_cap_makes_room_by_evicting_the_oldest():
    # a run of large transfers after smaller ones: the large block is kept (and reused),
    # the older small one goes, instead of the large one faulting in fresh memory each time
    pool = RecvPool(cap_bytes=3 * POOL_MIN_BYTES)
    small = pool.empty(BIG, torch.float32)
    del small
    gc.collect()
    assert pool.free_bytes == POOL_MIN_BYTES
    large = pool.empty([3 * BIG[0]], torch.float32)
    ptr = large.data_ptr()
    del large
    gc.collect()
    assert pool.free_bytes == 3 * POOL_MIN_BYTES  # the small block made room
    again = pool.empty([3 * BIG[0]], torch.float32)
    assert again.data_ptr() == ptr and pool.reused == 1
    assert pool.free_bytes == 0  # the small block was let go


def test_every_dtype_comes_back_with_its_shape_and_the_block_returns():
    """Dtypes numpy has are lent as an ndarray of that dtype and shape (one array, no views);
    the others (bfloat16, float8) as bytes viewed as them: the same tensor either way."""
    pool = RecvPool(cap_bytes=1 << 30)
    for name in ("float16", "float32", "float64", "complex64", "bool", "uint8", "int8",
                 "int16", "int32", "int64", "uint16", "uint32", "uint64", "bfloat16",
                 "float8_e4m3fn"):
        dtype = getattr(torch, name, None)
        if dtype is None:
            continue
        t = pool.empty([512, 2048], dtype)
        assert t.dtype == dtype and t.shape == (512, 2048) and t.is_contiguous(), name
        t.view(torch.uint8).fill_(7)  # writable, all of it
        ptr = t.data_ptr()
        del t
        gc.collect()
        again = pool.empty([512, 2048], dtype)
        assert again.data_ptr() == ptr, name  # its block came back and was lent again
        del again
        gc.collect()
