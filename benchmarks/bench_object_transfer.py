"""Object transfer speed: a zmesh pull against a raw pyzmq transfer of the same bytes.

Two source processes hold the same object: one a zmesh node's transfer half (store +
event loop + ObjectTransfer), one a hand-written pyzmq ROUTER that answers chunk requests
with zero-copy slices of a numpy buffer. This process pulls the object from each over
loopback tcp with the same chunk size and window of outstanding requests, landing the bytes
in its store (zmesh) or in a preallocated buffer (raw: the same one copy per chunk). zmesh's
tcp is CURVE-encrypted (the sources hold this process's token) unless --insecure. Rounds
alternate; the first zmesh round writes into fresh store memory (cold), later ones reuse
it, as the raw buffer is reused.

    python benchmarks/bench_object_transfer.py [--quick] [--size-mb N] [--chunk-mib N]
                                               [--window N] [--rounds N] [--sweep]
                                               [--insecure]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import numpy as np
import zmq

from zmesh.runtime.loop import EventLoop
from zmesh.runtime.node.object_transfer import ObjectTransfer
from zmesh.security import keys
from zmesh.store.mapping import StoreMapper
from zmesh.store.object_store import ObjectStore
from zmesh.transports import open_endpoint

MiB = 1 << 20
OBJECT_ID = b"bench-object"
SHM = "/dev/shm" if os.path.isdir("/dev/shm") else None


def fill(buf: memoryview | np.ndarray, size: int) -> None:
    """A byte pattern cheap to make and to check (a misplaced chunk shows)."""
    np.frombuffer(buf, np.uint8, count=size)[:] = np.arange(size, dtype=np.uint8) * 7 + 3


class TransferHalf:
    """A node's transfer half in this process: store, endpoint, loop thread, ObjectTransfer."""

    def __init__(self, store_dir: str, capacity: int, chunk: int | None = None,
                 window: int | None = None, *, insecure: bool = False,
                 local_root: str | None = None) -> None:
        """`chunk`/`window`: ObjectTransfer's (its defaults when None); `insecure`: CURVE
        off; `local_root`: the store root same-host copies may read from (None: off)."""
        options: dict[str, Any] = {"local_root": local_root}
        if chunk is not None:
            options["chunk_size"] = chunk
        if window is not None:
            options.update(window=window, max_outstanding=max(window, 16))
        self.store = ObjectStore(store_dir, capacity, max_segment_size=2 << 30)
        self.endpoint = open_endpoint("tcp://127.0.0.1:0", insecure=insecure)
        self.loop = EventLoop(self.endpoint, "bench")
        self.mapper = StoreMapper(store_dir)
        self.transfer = ObjectTransfer(self.store, mapper=self.mapper, **options)
        self.transfer.register(self.loop)
        self.loop.start_thread()

    def call(self, fn: Any, *args: Any) -> Any:
        done = threading.Event()
        box: list[Any] = []

        def run() -> None:
            try:
                box.append(fn(*args))
            except BaseException as exc:
                box.append(exc)
            done.set()

        self.loop.call_soon(run)
        done.wait()
        if isinstance(box[0], BaseException):
            raise box[0]
        return box[0]

    def put(self, size: int) -> None:
        def write() -> None:
            loc = self.store.allocate(OBJECT_ID, size, owner="bench")
            with self.mapper.writable(loc) as view:
                fill(view, size)
            self.store.seal(OBJECT_ID)

        self.call(write)

    def close(self) -> None:
        self.loop.stop()
        assert self.loop.thread is not None
        self.loop.thread.join(10)
        self.transfer.close()
        self.endpoint.close()
        self.mapper.close()
        self.store.close()


# -- sources (child processes) ----------------------------------------------------------------


def serve_zmesh(size: int, chunk: int, window: int) -> None:
    store_dir = tempfile.mkdtemp(prefix="zmesh-bench-src-", dir=SHM)
    half = TransferHalf(os.path.join(store_dir, "store"), size + 64 * MiB, chunk, window)
    try:
        half.put(size)
        print(half.endpoint.address, flush=True)
        sys.stdin.read()  # serve until the parent closes our stdin
    finally:
        half.close()
        shutil.rmtree(store_dir, ignore_errors=True)


def serve_raw(size: int) -> None:
    """Answer [offset, length] with [offset, bytes] as zero-copy frames of one buffer."""
    data = np.empty(size, np.uint8)
    fill(data, size)
    view = data.data
    context = zmq.Context()
    router = context.socket(zmq.ROUTER)
    router.linger = 0
    port = router.bind_to_random_port("tcp://127.0.0.1")
    print(f"tcp://127.0.0.1:{port}", flush=True)
    stop = threading.Thread(target=lambda: (sys.stdin.read(), os._exit(0)), daemon=True)
    stop.start()
    while True:
        identity, request = router.recv_multipart()
        offset = int.from_bytes(request[:8], "little")
        length = int.from_bytes(request[8:16], "little")
        router.send(identity, zmq.SNDMORE)
        router.send(request[:8], zmq.SNDMORE)
        router.send(view[offset : offset + length], copy=False)


def start_source(kind: str, size: int, chunk: int, window: int) -> tuple[subprocess.Popen[str],
                                                                         str]:
    """Start a source child; it holds this process's cluster token (tcp is CURVE + ZAP
    admitted: a child with keys of its own is a mesh of its own and answers nothing of ours,
    which the pull saw as a source that "stopped answering ... after 0 bytes")."""
    env = dict(os.environ)
    creds = keys.process_credentials()
    if creds is not None:
        env[keys.TOKEN_ENV] = creds.token
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve", kind, "--size-mb", str(size / 1e6),
         "--chunk-mib", str(chunk / MiB), "--window", str(window)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    address = proc.stdout.readline().strip()
    if not address:
        raise RuntimeError(f"{kind} source exited with {proc.wait()}")
    return proc, address


def stop_source(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.close()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    proc.stdout.close()


# -- pullers (this process) -------------------------------------------------------------------


def pull_zmesh(half: TransferHalf, source: str, size: int) -> float:
    """Seconds from the pull's start to its sealed copy; the copy is then freed."""
    done = threading.Event()
    times: list[float] = []
    errors: list[BaseException] = []

    def on_done(object_id: bytes, error: BaseException | None) -> None:
        times.append(time.perf_counter())
        if error is not None:
            errors.append(error)
        done.set()

    def start() -> None:
        times.append(time.perf_counter())
        half.transfer.pull(OBJECT_ID, source, size, on_done)

    half.loop.call_soon(start)
    done.wait()
    if errors:
        raise errors[0]
    return times[1] - times[0]


def check_zmesh(half: TransferHalf, size: int) -> bool:
    def check() -> bool:
        loc = half.store.pin(OBJECT_ID, "bench")
        try:
            with half.mapper.writable(loc) as view:
                expected = np.empty(size, np.uint8)
                fill(expected, size)
                return bool(np.array_equal(np.frombuffer(view, np.uint8), expected))
        finally:
            half.store.unpin(OBJECT_ID, "bench")

    ok: bool = half.call(check)
    return ok


def pull_raw(dealer: zmq.Socket[bytes], dest: memoryview, size: int, chunk: int,
             window: int) -> float:
    """The same pull by hand: `window` requests in flight, each chunk copied into `dest`."""
    start = time.perf_counter()
    next_offset = 0
    in_flight = 0
    received = 0
    while next_offset < size and in_flight < window:
        length = min(chunk, size - next_offset)
        dealer.send(next_offset.to_bytes(8, "little") + length.to_bytes(8, "little"))
        next_offset += length
        in_flight += 1
    while received < size:
        head, body = dealer.recv_multipart(copy=False)
        offset = int.from_bytes(head.bytes, "little")
        n = len(body)
        dest[offset : offset + n] = body.buffer
        received += n
        in_flight -= 1
        if next_offset < size:
            length = min(chunk, size - next_offset)
            dealer.send(next_offset.to_bytes(8, "little") + length.to_bytes(8, "little"))
            next_offset += length
            in_flight += 1
    return time.perf_counter() - start


def compare(size: int, chunk: int, window: int, rounds: int, verify: bool) -> dict[str, Any]:
    """Alternating rounds of both pulls; returns seconds per round for each."""
    zsrc, zaddr = start_source("zmesh", size, chunk, window)
    rsrc, raddr = start_source("raw", size, chunk, window)
    scratch = tempfile.mkdtemp(prefix="zmesh-bench-dst-", dir=SHM)
    half = TransferHalf(os.path.join(scratch, "store"), size + 64 * MiB, chunk, window)
    context = zmq.Context()
    dealer = context.socket(zmq.DEALER)
    dealer.linger = 0
    dealer.connect(raddr)
    dest = np.empty(size, np.uint8)
    dest[:] = 0  # fault the pages in, as a reused buffer would be
    out: dict[str, Any] = {"zmesh": [], "raw": [], "ok": True}
    try:
        for i in range(rounds):
            out["zmesh"].append(pull_zmesh(half, zaddr, size))
            if verify and i == rounds - 1:
                out["ok"] &= check_zmesh(half, size)
            half.call(half.transfer.free, [OBJECT_ID])
            out["raw"].append(pull_raw(dealer, dest.data, size, chunk, window))
        if verify:
            expected = np.empty(size, np.uint8)
            fill(expected, size)
            out["ok"] &= bool(np.array_equal(dest, expected))
    finally:
        dealer.close()
        context.term()
        half.close()
        shutil.rmtree(scratch, ignore_errors=True)
        stop_source(zsrc)
        stop_source(rsrc)
    return out


def report(size: int, chunk: int, window: int, out: dict[str, Any]) -> None:
    gbs = [size / 1e9 / t for t in out["zmesh"]]
    raw = [size / 1e9 / t for t in out["raw"]]
    warm = gbs[1:] or gbs
    print(f"object {size / 1e9:.2f} GB, chunk {chunk // MiB} MiB, window {window}, "
          f"{len(gbs)} rounds, loopback tcp, bytes checked: {out['ok']}")
    print(f"  {'':22} {'best GB/s':>10} {'median GB/s':>12}")
    print(f"  {'zmesh pull (cold)':22} {gbs[0]:10.2f} {'':>12}")
    print(f"  {'zmesh pull (warm)':22} {max(warm):10.2f} {statistics.median(warm):12.2f}")
    print(f"  {'raw pyzmq':22} {max(raw):10.2f} {statistics.median(raw):12.2f}")
    print(f"  zmesh/raw (best warm): {max(warm) / max(raw):.0%}   "
          f"(median: {statistics.median(warm) / statistics.median(raw):.0%})")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="256 MB, 3 rounds")
    p.add_argument("--size-mb", type=float, default=1000.0, help="object size in MB (1e6 B)")
    p.add_argument("--chunk-mib", type=float, default=4.0)
    p.add_argument("--window", type=int, default=4)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--sweep", action="store_true", help="try several chunk sizes and windows")
    p.add_argument("--insecure", action="store_true",
                   help="zmesh's tcp without CURVE (as the raw pyzmq transfer is): both "
                        "halves get $ZMESH_INSECURE=1")
    p.add_argument("--serve", choices=["zmesh", "raw"], help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.insecure:
        os.environ[keys.INSECURE_ENV] = "1"  # before any endpoint opens; the children inherit it
    size = int((256.0 if a.quick else a.size_mb) * 1e6)
    chunk = int(a.chunk_mib * MiB)
    if a.serve == "zmesh":
        serve_zmesh(size, chunk, a.window)
        return
    if a.serve == "raw":
        serve_raw(size)
        return
    rounds = 3 if a.quick else a.rounds
    configs = [(c * MiB, w) for c in (2, 8, 32) for w in (2, 4, 8)] if a.sweep else \
        [(chunk, a.window)]
    for c, w in configs:
        report(size, c, w, compare(size, c, w, rounds, verify=not a.sweep))


if __name__ == "__main__":
    main()
