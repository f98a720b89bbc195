"""Test and benchmark harness for object transfer: a node's transfer half, in a thread or a
child process.

`TransferNode` is a store, an endpoint, an event loop on its own thread and an
`ObjectTransfer`, which is all of a node that pulls and serves objects. Run this file as a
script to get one in a child process that takes line commands on stdin (see `serve`).
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from zmesh.protocol.messages.transfer import ChunkRequest
from zmesh.runtime.loop import EventLoop
from zmesh.runtime.node.object_transfer import ObjectTransfer
from zmesh.security import keys
from zmesh.store.mapping import StoreMapper
from zmesh.store.object_store import ObjectStore
from zmesh.transports import open_endpoint

MiB = 1 << 20


def pattern(size: int, seed: int) -> bytes:
    """Random bytes (a misplaced or repeated chunk cannot go unnoticed)."""
    return np.random.default_rng(seed).bytes(size)


def digest(data: Any) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


class TransferNode:
    """The transfer half of a node: everything runs on the loop thread; `call` waits for it."""

    def __init__(self, address: str, store_dir: str, capacity: int, **options: Any) -> None:
        self.store = ObjectStore(store_dir, capacity)
        self.endpoint = open_endpoint(address)
        self.address = self.endpoint.address
        self.loop = EventLoop(self.endpoint, "transfer-node")
        self.mapper = StoreMapper(store_dir)
        self.transfer = ObjectTransfer(self.store, mapper=self.mapper, **options)
        self.transfer.register(self.loop)
        self._next_id = 0
        self._closed = False
        self.loop.start_thread()

    def call(self, fn: Callable[..., Any], *args: Any, timeout: float = 60.0) -> Any:
        """Run `fn(*args)` on the loop thread and return its result (or raise its error)."""
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def run() -> None:
            try:
                fut.set_result(fn(*args))
            except BaseException as exc:
                fut.set_exception(exc)

        self.loop.call_soon(run)
        return fut.result(timeout)

    def put(self, data: bytes) -> bytes:
        """Store `data` as a sealed primary copy; returns its object id."""
        self._next_id += 1
        object_id = f"obj-{os.getpid()}-{self._next_id}".encode()

        def write() -> None:
            loc = self.store.allocate(object_id, len(data), owner="test")
            with self.mapper.writable(loc) as view:
                view[:] = data
            self.store.seal(object_id)

        self.call(write)
        return object_id

    def pull(self, object_id: bytes, source: str | list[str], size: int
             ) -> concurrent.futures.Future[bytes]:
        """Start a pull on the loop; the future gets the object id or the pull's error."""
        fut: concurrent.futures.Future[bytes] = concurrent.futures.Future()
        self.loop.call_soon(self.transfer.pull, object_id, source, size, _resolver(fut))
        return fut

    def digest_of(self, object_id: bytes) -> str:
        """The digest of the local copy (pinned while read)."""

        def read() -> str:
            loc = self.store.pin(object_id, "test-reader")
            try:
                with self.mapper.writable(loc) as view:
                    return digest(view)
            finally:
                self.store.unpin(object_id, "test-reader")

        result: str = self.call(read)
        return result

    def state(self) -> dict[str, Any]:
        """Store and transfer counters, read on the loop thread."""

        def read() -> dict[str, Any]:
            st = self.store.stats()
            out = {k: getattr(st, k) for k in st.__struct_fields__}
            tr = self.transfer.stats()
            out.update({k: getattr(tr, k) for k in tr.__struct_fields__})
            return out

        result: dict[str, Any] = self.call(read)
        return result

    def die_after_requests(self, count: int) -> None:
        """SIGKILL this process when the `count`-th chunk request arrives (a crash mid-pull)."""
        seen = [0]
        serve = self.transfer.on_chunk_request

        def counting(sender: str, msg: ChunkRequest, bufs: list[Any]) -> None:
            seen[0] += 1
            if seen[0] >= count:
                os.kill(os.getpid(), signal.SIGKILL)
            serve(sender, msg, bufs)

        self.call(self.loop.on, ChunkRequest, counting)

    def die_mid_local_copy(self) -> None:
        """SIGKILL this process after the first piece of a local copy (a crash mid-copy)."""
        step = self.transfer._copy_step

        def stepping(tid: int, fd: int, src_offset: int, done: int) -> None:
            if done > 0:
                os.kill(os.getpid(), signal.SIGKILL)
            step(tid, fd, src_offset, done)

        def install() -> None:
            self.transfer._copy_step = stepping  # type: ignore[method-assign]

        self.call(install)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.loop.stop()
        if self.loop.thread is not None:
            self.loop.thread.join(10)
        self.transfer.close()
        self.endpoint.close()
        self.mapper.close()
        self.store.close()


def _resolver(fut: concurrent.futures.Future[bytes]) -> Callable[[bytes, BaseException | None],
                                                                   None]:
    def done(object_id: bytes, error: BaseException | None) -> None:
        if error is None:
            fut.set_result(object_id)
        else:
            fut.set_exception(error)

    return done


class PeerProcess:
    """A `TransferNode` in a child process (this file run as a script), driven by lines."""

    def __init__(self, address: str, store_dir: str, capacity: int, **options: Any) -> None:
        # the child holds this process's credentials (tcp is CURVE + ZAP: a child with keys
        # of its own would be another mesh, refused by ours and refusing us)
        creds = keys.process_credentials()
        env = {**os.environ, **({keys.TOKEN_ENV: creds.token} if creds is not None else {})}
        self.proc = subprocess.Popen(
            [sys.executable, __file__, address, store_dir, str(capacity), json.dumps(options)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self.address = self._line()

    def _line(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"transfer peer exited with {self.proc.wait(10)}")
        return line.strip()

    def command(self, *words: object) -> str:
        assert self.proc.stdin is not None
        self.proc.stdin.write(" ".join(map(str, words)) + "\n")
        self.proc.stdin.flush()
        return self._line()

    def put(self, size: int, seed: int) -> tuple[bytes, str]:
        oid, dig = self.command("put", size, seed).split()
        return bytes.fromhex(oid), dig

    def state(self) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(self.command("state"))
        return result

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.command("quit")
            except (BrokenPipeError, RuntimeError):
                pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()


def serve(argv: list[str]) -> None:
    """Child side of `PeerProcess`: print the bound address, then answer commands
    `put SIZE SEED` (-> "OIDHEX DIGEST"), `free OIDHEX`, `state` (-> json), `die-after N`,
    `pull OIDHEX SOURCE SIZE` (starts a pull, -> "ok"), `die-mid-local-copy` and `quit`,
    one reply line each."""
    address, store_dir, capacity, options = argv[0], argv[1], int(argv[2]), json.loads(argv[3])
    node = TransferNode(address, store_dir, capacity, **options)
    print(node.address, flush=True)
    try:
        for line in sys.stdin:
            words = line.split()
            if words[0] == "put":
                data = pattern(int(words[1]), int(words[2]))
                oid = node.put(data)
                print(oid.hex(), digest(data), flush=True)
            elif words[0] == "free":
                node.call(node.transfer.free, [bytes.fromhex(words[1])])
                print("ok", flush=True)
            elif words[0] == "state":
                print(json.dumps(node.state()), flush=True)
            elif words[0] == "die-after":
                node.die_after_requests(int(words[1]))
                print("ok", flush=True)
            elif words[0] == "pull":
                node.pull(bytes.fromhex(words[1]), words[2], int(words[3]))
                print("ok", flush=True)
            elif words[0] == "die-mid-local-copy":
                node.die_mid_local_copy()
                print("ok", flush=True)
            elif words[0] == "quit":
                print("bye", flush=True)
                break
    finally:
        node.close()


if __name__ == "__main__":
    serve(sys.argv[1:])
