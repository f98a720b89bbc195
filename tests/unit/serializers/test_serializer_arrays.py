"""numpy arrays and torch tensors: every dtype and shape, and zero copy on both sides."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from serializer_helpers import assert_same

from zmesh.serializers import Serialized, SerializerRegistry

RAW_DTYPES = [
    "?", "i1", "u1", "<i2", ">i2", "<u4", ">i8", "<f2", "<f4", ">f4", "<f8", ">f8", "g",
    "<c8", ">c16", "M8[ns]", "m8[s]", "S5", "<U3", ">U3", "V4",
]  # fmt: skip


def received(s: Serialized) -> tuple[Serialized, list[bytes]]:
    """`s` as a receiver sees it: each buffer a separate read-only frame."""
    frames = [bytes(b) for b in s.buffers]
    return Serialized(s.name, s.header, list(frames)), frames


def views_frame(array: np.ndarray, frame: bytes) -> bool:
    return bool(np.shares_memory(array, np.frombuffer(frame, dtype=np.uint8)))


def layouts(base: np.ndarray) -> dict[str, np.ndarray]:
    return {
        "C": base,
        "F": np.asfortranarray(base),
        "permuted": base.transpose(1, 2, 0),
        "stepped": base[:, ::2],
        "reversed": base[::-1],
        "0-d": base.reshape(-1)[:1].reshape(()),
        "empty": base[:, :0],
    }


@pytest.mark.parametrize("dtype", RAW_DTYPES)
@pytest.mark.parametrize("layout", ["C", "F", "permuted", "stepped", "reversed", "0-d", "empty"])
def test_numpy_arrays_of_every_raw_dtype_and_layout_round_trip(
    registry: SerializerRegistry, dtype: str, layout: str
) -> None:
    raw = np.arange(2 * 4 * 3, dtype=np.uint8).tobytes() * np.dtype(dtype).itemsize
    base = np.frombuffer(raw, dtype=dtype)[: 2 * 4 * 3].reshape(2, 4, 3).copy()
    array = layouts(base)[layout]
    s = registry.serialize(array)
    assert s.name == "numpy"
    rx, frames = received(s)
    out = registry.deserialize(rx, trusted=False)
    assert out.dtype == array.dtype and out.shape == array.shape
    assert out.tobytes() == array.tobytes()
    if array.size and layout not in ("stepped", "reversed"):
        assert out.strides == array.strides, "dense layouts keep their strides (no copy)"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    array=hnp.arrays(
        dtype=hnp.scalar_dtypes(),
        shape=hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=4),
    ),
    data=st.data(),
)
def test_any_numpy_array_round_trips_through_auto_pick(
    registry: SerializerRegistry, array: np.ndarray, data: st.DataObject
) -> None:
    if array.ndim:
        axes = data.draw(st.permutations(range(array.ndim)))
        array = array.transpose(axes)
    rx, _ = received(registry.serialize(array))
    assert_same(array, registry.deserialize(rx, trusted=True))


def test_numpy_zero_copy_on_send_and_receive(registry: SerializerRegistry) -> None:
    array = np.arange(100_000, dtype=np.float64).reshape(1000, 100)
    for candidate in (array, array.T, np.asfortranarray(array)):
        s = registry.serialize(candidate)
        assert np.shares_memory(candidate, np.frombuffer(s.buffers[0], np.uint8))
        rx, frames = received(s)
        out = registry.deserialize(rx, trusted=False)
        assert views_frame(out, frames[0])
        assert not out.flags.writeable  # it views a read-only frame


def test_non_contiguous_arrays_are_copied_to_c_order(registry: SerializerRegistry) -> None:
    array = np.arange(20.0)[::2]
    s = registry.serialize(array)
    assert not np.shares_memory(array, np.frombuffer(s.buffers[0], np.uint8))
    out = registry.deserialize(received(s)[0], trusted=False)
    assert out.flags.c_contiguous and np.array_equal(out, array)


@pytest.mark.parametrize(
    "array",
    [
        np.array([1, "a", None], dtype=object),
        np.zeros(3, dtype=[("x", "<i4"), ("y", "<f8")]),
        np.ma.masked_array([1, 2], mask=[0, 1]),
    ],
    ids=["object", "structured", "subclass"],
)
def test_object_structured_and_subclassed_arrays_fall_back_to_pickle(
    registry: SerializerRegistry, array: np.ndarray
) -> None:
    s = registry.serialize(array)
    assert s.name == "pickle5"
    out = registry.deserialize(received(s)[0], trusted=True)
    assert type(out) is type(array) and out.dtype == array.dtype
    assert out.tolist() == array.tolist()


def test_numpy_refuses_object_dtype_headers_from_the_wire(registry: SerializerRegistry) -> None:
    from zmesh.errors import SerializationError
    from zmesh.serializers.numpy_array import ArrayHeader, encode_header

    forged = encode_header(ArrayHeader("|O", [2], [8]))
    with pytest.raises(SerializationError, match="not a raw fixed-size dtype"):
        registry.deserialize(("numpy", forged, [bytes(16)]), trusted=False)


def test_pickle5_sends_arrays_in_containers_out_of_band_without_copy(
    registry: SerializerRegistry,
) -> None:
    arrays = {"obs": np.ones((256, 256)), "act": [np.arange(1000), np.zeros((8, 8), order="F")]}
    s = registry.serialize(arrays)
    assert s.name == "pickle5" and len(s.buffers) == 3
    assert len(s.header) < 1000, "array bytes are not in the pickle stream"
    assert np.shares_memory(arrays["obs"], np.frombuffer(s.buffers[0], np.uint8))
    rx, frames = received(s)
    out = registry.deserialize(rx, trusted=True)
    assert views_frame(out["obs"], frames[0])
    assert views_frame(out["act"][0], frames[1])
    assert_same(arrays, out)


# -- torch ---------------------------------------------------------------------------


def _torch():  # type: ignore[no-untyped-def]
    return pytest.importorskip("torch")


def data_in_frame(tensor: object, frame: bytes) -> bool:
    start = np.frombuffer(frame, np.uint8).ctypes.data
    ptr = tensor.data_ptr()  # type: ignore[attr-defined]
    return bool(start <= ptr < start + len(frame))


TORCH_DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16",
                "float32", "float64", "complex64", "complex128", "float8_e4m3fn", "float8_e5m2"]  # fmt: skip


@pytest.mark.parametrize("dtype_name", TORCH_DTYPES)
def test_torch_tensors_of_every_dtype_round_trip_zero_copy(
    registry: SerializerRegistry, dtype_name: str
) -> None:
    torch = _torch()
    dtype = getattr(torch, dtype_name)
    base = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4).to(dtype)
    for tensor in (base, base.permute(2, 0, 1), base[:, ::2], base[0, 0, 0], base[:, :0]):
        s = registry.serialize(tensor)
        assert s.name == "torch"
        rx, frames = received(s)
        out = registry.deserialize(rx, trusted=False)
        assert type(out) is torch.Tensor and out.dtype == dtype and out.shape == tensor.shape
        assert torch.equal(out.view(torch.uint8) if dtype.itemsize == 1 else out,
                           tensor.view(torch.uint8) if dtype.itemsize == 1 else tensor)  # fmt: skip
        if tensor.numel():
            assert data_in_frame(out, frames[0])


def test_torch_parameters_and_requires_grad_survive(registry: SerializerRegistry) -> None:
    torch = _torch()
    param = torch.nn.Parameter(torch.randn(3, 2))
    leaf = torch.ones(4, requires_grad=True)
    for tensor in (param, leaf):
        out = registry.deserialize(received(registry.serialize(tensor))[0], trusted=False)
        assert type(out) is type(tensor) and out.requires_grad
        assert torch.equal(out.detach(), tensor.detach())


def test_torch_tensors_inside_containers_travel_out_of_band_through_pickle5(
    registry: SerializerRegistry,
) -> None:
    torch = _torch()
    batch = {"x": torch.randn(128, 64), "y": torch.arange(128).to(torch.bfloat16), "n": 3}
    s = registry.serialize(batch)
    assert s.name == "pickle5" and len(s.buffers) == 2
    assert len(s.header) < 1000
    rx, frames = received(s)
    out = registry.deserialize(rx, trusted=True)
    assert data_in_frame(out["x"], frames[0]) and data_in_frame(out["y"], frames[1])
    assert torch.equal(out["x"], batch["x"]) and torch.equal(out["y"], batch["y"])
    assert out["n"] == 3


def test_non_leaf_tensors_and_sparse_tensors_fall_back_to_pickle(
    registry: SerializerRegistry,
) -> None:
    torch = _torch()
    sparse = torch.eye(3).to_sparse()
    s = registry.serialize(sparse)
    assert s.name == "pickle5"
    assert torch.equal(registry.deserialize(s, trusted=True).to_dense(), torch.eye(3))
