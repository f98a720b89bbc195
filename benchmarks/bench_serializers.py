"""Serializer speed: the zmesh registry against plain pickle (protocol 5) and msgspec alone.

Small: encode+decode of a small dict, in ops/s. Large: encode+decode of a 100 MB float64
array, in GB/s; "packed" rows also copy it once into a preallocated buffer (the object store
path), "zero-copy" rows only build views (the zmq path, where the socket does the copy).

    python benchmarks/bench_serializers.py [--quick]
"""

from __future__ import annotations

import argparse
import pickle
import time
from collections.abc import Callable

import msgspec
import numpy as np

from zmesh.serializers import (
    SerializerRegistry,
    pack_into,
    packed_size,
    unpack_from,
)

SMALL = {"a": 1, "b": [1, 2, 3], "s": "x" * 20}


def best_seconds(fn: Callable[[], object], loops: int, repeats: int) -> float:
    """Best time per call over `repeats` runs of `loops` calls."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(loops):
            fn()
        best = min(best, (time.perf_counter() - start) / loops)
    return best


def small_cases(registry: SerializerRegistry) -> dict[str, Callable[[], object]]:
    encoder, decoder = msgspec.msgpack.Encoder(), msgspec.msgpack.Decoder()

    def zmesh_registry() -> object:
        return registry.deserialize(registry.serialize(SMALL), trusted=False)

    def plain_pickle() -> object:
        return pickle.loads(pickle.dumps(SMALL, protocol=5))

    def msgspec_alone() -> object:
        return decoder.decode(encoder.encode(SMALL))

    return {"zmesh registry": zmesh_registry, "pickle p5": plain_pickle, "msgspec": msgspec_alone}


def large_cases(
    registry: SerializerRegistry, array: np.ndarray
) -> dict[str, Callable[[], object]]:
    store = bytearray(packed_size(registry.serialize(array)))
    store_view = memoryview(store)
    encoder, decoder = msgspec.msgpack.Encoder(), msgspec.msgpack.Decoder()

    def zmesh_packed() -> object:
        pack_into(registry.serialize(array), store_view)
        return registry.deserialize(unpack_from(store_view), trusted=False)

    def zmesh_zero_copy() -> object:
        return registry.deserialize(registry.serialize(array), trusted=False)

    def plain_pickle() -> object:
        return pickle.loads(pickle.dumps(array, protocol=5))

    def msgspec_alone() -> object:
        return np.frombuffer(decoder.decode(encoder.encode(memoryview(array))), array.dtype)

    return {
        "zmesh registry, packed (1 memcpy)": zmesh_packed,
        "zmesh registry, zero-copy": zmesh_zero_copy,
        "pickle p5 in-band": plain_pickle,
        "msgspec (bytes)": msgspec_alone,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats (a few seconds)")
    args = parser.parse_args()
    loops, repeats, big_repeats = (5_000, 3, 2) if args.quick else (50_000, 5, 5)
    registry = SerializerRegistry()

    print(f"small message {SMALL!r}: encode+decode")
    print(f"{'':36} {'ops/s':>12} {'us/op':>8}")
    small = {name: best_seconds(fn, loops, repeats) for name, fn in small_cases(registry).items()}
    for name, seconds in small.items():
        print(f"{name:36} {1 / seconds:12,.0f} {seconds * 1e6:8.2f}")
    reg = small["zmesh registry"]
    print(
        f"registry overhead: {reg / small['msgspec']:.1f}x msgspec alone, "
        f"{reg / small['pickle p5']:.2f}x pickle"
    )
    pick = best_seconds(lambda: registry.pick(SMALL), loops, repeats)
    print(f"pick (type dispatch) for a dict: {pick * 1e9:.0f} ns")

    array = np.random.default_rng(0).standard_normal(100 * 2**20 // 8)
    gb = array.nbytes / 1e9
    print(f"\nfloat64 array, {array.nbytes / 2**20:.0f} MiB: encode+decode")
    print(f"{'':36} {'GB/s':>12} {'ms/op':>8}")
    large = {
        name: best_seconds(fn, 1, big_repeats)
        for name, fn in large_cases(registry, array).items()
    }
    for name, seconds in large.items():
        print(f"{name:36} {gb / seconds:12,.1f} {seconds * 1e3:8.2f}")


if __name__ == "__main__":
    main()
