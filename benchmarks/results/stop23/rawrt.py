"""Raw pyzmq ipc REQ/REP round trips per second (issue 8's yardstick): a REP thread in a
child process, a REQ in this one, `--n` round trips of a 1-byte message after 500 warm-up.

    python rawrt.py [--n 20000]     -> prints "raw_rt_per_s <rate>"
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import tempfile
import time

import zmq


def _serve(address: str, n: int) -> None:
    ctx = zmq.Context()
    rep = ctx.socket(zmq.REP)
    rep.bind(address)
    for _ in range(n):
        rep.send(rep.recv())
    rep.close(linger=0)
    ctx.term()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=20000)
    args = parser.parse_args()
    warm = 500
    with tempfile.TemporaryDirectory() as tmp:
        address = f"ipc://{os.path.join(tmp, 'rt.sock')}"
        server = multiprocessing.get_context("fork").Process(
            target=_serve, args=(address, warm + args.n))
        server.start()
        ctx = zmq.Context()
        req = ctx.socket(zmq.REQ)
        req.connect(address)
        for _ in range(warm):
            req.send(b"x")
            req.recv()
        start = time.perf_counter()
        for _ in range(args.n):
            req.send(b"x")
            req.recv()
        rate = args.n / (time.perf_counter() - start)
        req.close(linger=0)
        ctx.term()
        server.join(30)
    print(f"raw_rt_per_s {rate:.0f}")


if __name__ == "__main__":
    main()
