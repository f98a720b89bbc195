"""Transport speed: zmesh Endpoint against raw pyzmq DEALER/ROUTER, two processes, ipc and tcp.

Two figures per route: synchronous round trips per second (send 100 B, wait for the echo)
and pipelined messages per second (stream 100 B messages under a credit window; the server
acks every `BATCH` messages). The server runs in a child process started by this script.

    python benchmarks/bench_transports.py [--quick]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import zmq
from zmesh.transports import Endpoint, open_endpoint

PAYLOAD = 100
BATCH = 100  # the server acks every BATCH streamed messages
WINDOW = 2000  # unacked messages the client may have in flight
PING, STREAM, QUIT = b"P", b"S", b"Q"


# -- servers (child process) ----------------------------------------------------------------


def serve_raw(address: str) -> None:
    """Echo pings, ack streams, via one ROUTER, as a hand-written pyzmq server would."""
    context = zmq.Context()
    router = context.socket(zmq.ROUTER)
    router.linger = 0
    router.rcvhwm = router.sndhwm = 100_000
    router.bind(address)
    print("ready", flush=True)
    streamed = 0
    while True:
        identity, payload = router.recv_multipart()
        kind = payload[:1]
        if kind == PING:
            router.send_multipart([identity, payload])
        elif kind == STREAM:
            streamed += 1
            if streamed % BATCH == 0:
                router.send_multipart([identity, streamed.to_bytes(8, "big")])
        else:
            break
    router.close()
    context.term()


def serve_zmesh(address: str) -> None:
    """The same server on a zmesh Endpoint: replies go to the sender's address."""
    endpoint = open_endpoint(address, sndhwm=100_000, rcvhwm=100_000)
    print("ready", flush=True)
    streamed = 0
    recv, send = endpoint.recv, endpoint.send
    while True:
        message = recv()
        assert message is not None
        sender, frames = message
        payload = frames[0]
        kind = payload[:1]
        if kind == PING:
            send(sender, frames)
        elif kind == STREAM:
            streamed += 1
            if streamed % BATCH == 0:
                send(sender, [streamed.to_bytes(8, "big")])
        else:
            break
    endpoint.close()


# -- clients (this process) -----------------------------------------------------------------


class RawClient:
    def __init__(self, server: str, _own: str) -> None:
        self.context = zmq.Context()
        self.dealer = self.context.socket(zmq.DEALER)
        self.dealer.linger = 0
        self.dealer.rcvhwm = self.dealer.sndhwm = 100_000
        self.dealer.connect(server)
        self.send: Callable[[bytes], object] = self.dealer.send
        self.recv: Callable[[], bytes] = self.dealer.recv

    def close(self) -> None:
        self.dealer.send(QUIT)
        self.dealer.close(linger=1000)
        self.context.term()


class ZmeshClient:
    def __init__(self, server: str, own: str) -> None:
        self.endpoint: Endpoint = open_endpoint(own, sndhwm=100_000, rcvhwm=100_000)
        send, recv = self.endpoint.send, self.endpoint.recv

        def send_one(payload: bytes) -> None:
            send(server, [payload])

        def recv_one() -> bytes:
            message = recv()
            assert message is not None
            return bytes(message[1][0])

        self.send, self.recv = send_one, recv_one
        self.server = server

    def close(self) -> None:
        self.endpoint.send(self.server, [QUIT])
        self.endpoint.close()


def round_trips(client: RawClient | ZmeshClient, seconds: float) -> float:
    send, recv = client.send, client.recv
    ping = PING * PAYLOAD
    for _ in range(200):  # warm up connections and caches
        send(ping)
        recv()
    count = 0
    started = time.perf_counter()
    deadline = started + seconds
    while True:
        for _ in range(100):
            send(ping)
            recv()
        count += 100
        now = time.perf_counter()
        if now >= deadline:
            return count / (now - started)


def pipelined(client: RawClient | ZmeshClient, total: int) -> float:
    send, recv = client.send, client.recv
    message = STREAM * PAYLOAD
    total -= total % BATCH
    acked = sent = 0
    started = time.perf_counter()
    while acked < total:
        while sent < total and sent - acked < WINDOW:
            send(message)
            sent += 1
        acked = int.from_bytes(recv(), "big")
    return total / (time.perf_counter() - started)


# -- driver ---------------------------------------------------------------------------------


def measure(impl: str, route: str, workdir: str, seconds: float, total: int) -> tuple[float, float]:
    if route == "ipc":
        server_address = f"ipc://{workdir}/{impl}-server"
        own = f"ipc://{workdir}/{impl}-client"
    else:
        server_address = f"tcp://127.0.0.1:{free_port()}"
        own = "tcp://127.0.0.1:0"
    child = subprocess.Popen(
        [sys.executable, __file__, "--serve", impl, server_address],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        if child.stdout.readline().strip() != "ready":
            raise RuntimeError(f"{impl} server on {server_address} did not start")
        client = (
            RawClient(server_address, own) if impl == "raw" else ZmeshClient(server_address, own)
        )
        try:
            rt = round_trips(client, seconds)
            msgs = pipelined(client, total)
        finally:
            client.close()
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if child.stdout is not None:
            child.stdout.close()
    return rt, msgs


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="short runs (a few seconds)")
    parser.add_argument("--repeat", type=int, default=None, help="runs per cell; best is kept")
    parser.add_argument("--serve", nargs=2, metavar=("IMPL", "ADDRESS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        impl, address = args.serve
        (serve_raw if impl == "raw" else serve_zmesh)(address)
        return
    seconds, total = (0.4, 40_000) if args.quick else (1.5, 200_000)
    repeat = args.repeat or (2 if args.quick else 5)
    workdir = tempfile.mkdtemp(prefix="zmb-", dir="/tmp")
    try:
        print(f"{PAYLOAD} B messages, window {WINDOW}, ack every {BATCH}; best of {repeat}")
        print(
            f"{'route':<6}{'impl':<8}{'sync rt/s':>12}{'ratio':>8}{'pipelined msg/s':>18}{'ratio':>8}"
        )
        for route in ("ipc", "tcp"):
            best = {"raw": (0.0, 0.0), "zmesh": (0.0, 0.0)}
            # Alternate the two so that load from elsewhere on the machine hits both alike.
            for _ in range(repeat):
                for impl in ("raw", "zmesh"):
                    rt, msgs = measure(impl, route, workdir, seconds, total)
                    best[impl] = (max(best[impl][0], rt), max(best[impl][1], msgs))
            raw_rt, raw_msgs = best["raw"]
            for impl in ("raw", "zmesh"):
                rt, msgs = best[impl]
                print(
                    f"{route:<6}{impl:<8}{rt:>12,.0f}{rt / raw_rt:>8.2f}"
                    f"{msgs:>18,.0f}{msgs / raw_msgs:>8.2f}"
                )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
