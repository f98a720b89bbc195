"""Microbenchmark of the wire codec: encode, decode and framing of small control messages.

Run: python benchmarks/bench_protocol.py [--quick]. Prints ns per operation (best of a few
repeats) for zmesh.protocol and, as a floor, for bare msgspec on the same message.
"""

from __future__ import annotations

import argparse
import timeit
from collections.abc import Callable

import msgspec

from zmesh.protocol import codec
from zmesh.protocol.messages.common import ErrorReply, Ping
from zmesh.protocol.messages.handshake import Hello


def best_ns(fn: Callable[[], object], number: int, repeat: int) -> float:
    """Best time per call in nanoseconds over `repeat` runs of `number` calls."""
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer iterations (~1 s)")
    args = parser.parse_args()
    number, repeat = (20_000, 3) if args.quick else (200_000, 5)

    cases = {
        "Ping": Ping(seq=12345),
        "ErrorReply": ErrorReply(request_id=77, kind="ActorDiedError", message="actor died"),
        "Hello": Hello(protocol_version=1, credential=b"k" * 32, sender="worker-01", role="worker"),
    }
    raw_enc = msgspec.msgpack.Encoder()
    payload = bytearray(1 << 20)
    rows: list[tuple[str, int, float, float, float, float, float]] = []
    for name, msg in cases.items():
        frame = codec.encode(msg)
        raw_dec = msgspec.msgpack.Decoder(type(msg))
        frames = codec.pack(msg, [payload])
        rows.append(
            (
                name,
                len(frame),
                best_ns(lambda m=msg: codec.encode(m), number, repeat),
                best_ns(lambda f=frame: codec.decode(f), number, repeat),
                best_ns(lambda m=msg: codec.decode(codec.encode(m)), number, repeat),
                best_ns(lambda m=msg: codec.unpack(codec.pack(m, [payload])), number, repeat),
                best_ns(lambda m=msg, d=raw_dec: d.decode(raw_enc.encode(m)), number, repeat),
            )
        )
        assert codec.unpack(frames)[1][0] is payload

    header = ("message", "bytes", "encode", "decode", "enc+dec", "pack+unpack 1MiB", "msgspec e+d")
    print(f"zmesh.protocol codec, ns per op ({'quick' if args.quick else 'full'} run)")
    print("{:<11} {:>5} {:>7} {:>7} {:>8} {:>17} {:>12}".format(*header))
    for row in rows:
        print("{:<11} {:>5} {:>7.0f} {:>7.0f} {:>8.0f} {:>17.0f} {:>12.0f}".format(*row))


if __name__ == "__main__":
    main()
