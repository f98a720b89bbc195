"""Transport speed: zmesh Endpoint against raw pyzmq DEALER/ROUTER, two processes, ipc and tcp.

Two figures per route: synchronous round trips per second (send 100 B, wait for the echo)
and pipelined messages per second (stream 100 B messages under a credit window; the server
acks every `BATCH` messages). The server runs in a child process started by this script.

On tcp, zmesh is CURVE-encrypted and ZAP-authenticated (the default; both processes share a
join token); `zmesh-plain` is the same endpoint with `insecure=True`, so the `vs plain`
column is what encryption costs. tcp also moves a bulk transfer (1 GiB in 1 MiB frames, 256
MiB with --quick) with each zmesh flavour.

Loopback moves bytes at memory-copy speed, faster than any network link, so it shows the
most that encryption can cost. `--link-gbit G` runs the tcp figures again between this
process and a server in a network namespace behind a veth pair shaped to G Gbit/s (root
and iproute2 needed; see `netns_link.py`): "between two machines" on a real link's bandwidth.

zmesh endpoints coalesce (`transports.zmq_batch`), as the runtime's event loop has them do;
`--no-coalesce` (or ZMESH_COALESCE=0) sends every message in a frame of its own.

    python benchmarks/bench_transports.py [--quick] [--link-gbit 10] [--no-coalesce]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import zmq

from zmesh.transports import Endpoint, open_endpoint

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from netns_link import Link, shaped_link  # noqa: E402  (a sibling module of this script)

PAYLOAD = 100
BATCH = 100  # the server acks every BATCH streamed messages
WINDOW = 2000  # unacked messages the client may have in flight
PING, STREAM, BULK, QUIT = b"P", b"S", b"B", b"Q"
BULK_FRAME = 1 << 20
BULK_WINDOW = 16  # bulk frames in flight
LINK_PORT = 47310  # servers' ports inside a --link-gbit namespace (its own port space)
COALESCE_ENV = "ZMESH_COALESCE"  # children inherit it


def _coalesce() -> bool:
    return os.environ.get(COALESCE_ENV, "1") != "0"


# -- servers (child process) ----------------------------------------------------------------


RAW_CURVE_ENV = "ZMESH_BENCH_RAW_CURVE"
"""A CURVE key pair (z85 public and secret, space-separated) for the raw-curve server, made by the driver."""


def serve_raw(address: str, curve: bool = False) -> None:
    """Echo pings, ack streams, via one ROUTER, as a hand-written pyzmq server would."""
    context = zmq.Context()
    router = context.socket(zmq.ROUTER)
    router.linger = 0
    if curve:  # libzmq's CURVE alone, no authenticator: what the cipher costs by itself
        public, secret = os.environ[RAW_CURVE_ENV].encode().split(b" ")
        router.curve_server = True
        router.curve_publickey, router.curve_secretkey = public, secret
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
        elif kind == BULK:
            router.send_multipart([identity, b"k"])
        else:
            break
    router.close()
    context.term()


def serve_zmesh(address: str, insecure: bool = False) -> None:
    """The same server on a zmesh Endpoint: replies go to the sender's address."""
    endpoint = open_endpoint(address, sndhwm=100_000, rcvhwm=100_000, insecure=insecure,
                             coalesce=_coalesce())
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
        elif kind == BULK:
            send(sender, [b"k"])
        else:
            break
    endpoint.close()


# -- clients (this process) -----------------------------------------------------------------


class RawClient:
    curve = False

    def __init__(self, server: str, _own: str) -> None:
        self.context = zmq.Context()
        self.dealer = self.context.socket(zmq.DEALER)
        self.dealer.linger = 0
        if self.curve:
            self.dealer.curve_serverkey = os.environ[RAW_CURVE_ENV].encode().split(b" ")[0]
            self.dealer.curve_publickey, self.dealer.curve_secretkey = zmq.curve_keypair()
        self.dealer.rcvhwm = self.dealer.sndhwm = 100_000
        self.dealer.connect(server)
        self.send: Callable[[bytes], object] = self.dealer.send
        self.recv: Callable[[], bytes] = self.dealer.recv

    def close(self) -> None:
        self.dealer.send(QUIT)
        self.dealer.close(linger=1000)
        self.context.term()


class RawCurveClient(RawClient):
    curve = True


class ZmeshClient:
    insecure = False

    def __init__(self, server: str, own: str) -> None:
        self.endpoint: Endpoint = open_endpoint(own, sndhwm=100_000, rcvhwm=100_000,
                                                insecure=self.insecure, coalesce=_coalesce())
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


class PlainZmeshClient(ZmeshClient):
    insecure = True


def _cpu_seconds(pid: int | None = None) -> float:
    """CPU seconds (user + system, all threads) used so far by this process or `pid`."""
    if pid is None:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime
    import psutil

    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def bulk(client: RawClient | ZmeshClient, total_bytes: int) -> float:
    """Bytes per second moving `total_bytes` in BULK_FRAME frames, BULK_WINDOW in flight."""
    send, recv = client.send, client.recv
    frame = BULK + bytes(BULK_FRAME - 1)
    frames = max(1, total_bytes // BULK_FRAME)
    acked = sent = 0
    started = time.perf_counter()
    while acked < frames:
        while sent < frames and sent - acked < BULK_WINDOW:
            send(frame)
            sent += 1
        recv()
        acked += 1
    return frames * BULK_FRAME / (time.perf_counter() - started)


def round_trips(client: RawClient | ZmeshClient, seconds: float) -> float:
    send, recv = client.send, client.recv
    ping = PING * PAYLOAD
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


def pipelined(client: RawClient | ZmeshClient, total: int, base: int) -> float:
    """Stream `total` messages; the server's acks count from `base` (its earlier streams)."""
    send, recv = client.send, client.recv
    message = STREAM * PAYLOAD
    acked = sent = 0
    started = time.perf_counter()
    while acked < total:
        while sent < total and sent - acked < WINDOW:
            send(message)
            sent += 1
        acked = int.from_bytes(recv(), "big") - base
    return total / (time.perf_counter() - started)


# -- driver ---------------------------------------------------------------------------------


def start_server(impl: str, address: str, link: Link | None = None) -> subprocess.Popen[str]:
    argv = [sys.executable, __file__, "--serve", impl, address]
    child = subprocess.Popen(
        argv if link is None else link.command(argv), stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    if child.stdout.readline().strip() != "ready":
        child.kill()
        child.wait()
        raise RuntimeError(f"{impl} server on {address} did not start")
    return child


def measure_route(
    route: str, workdir: str, repeat: int, seconds: float, total: int
) -> dict[str, tuple[float, float]]:
    return {impl: best[:2] for impl, best in
            measure_route_bulk(route, workdir, repeat, seconds, total, 0)[0].items()}


def measure_route_bulk(
    route: str, workdir: str, repeat: int, seconds: float, total: int, bulk_bytes: int,
    link: Link | None = None,
) -> tuple[dict[str, tuple[float, float, float]], dict[str, list[tuple[float, float, float]]]]:
    """Best (round trips/s, messages/s, bulk B/s) per implementation over `repeat`
    alternating rounds, and every round's figures.

    Both servers stay up and the clients take turns in short rounds, so that load from
    elsewhere on the machine falls on both alike; the best round is the least disturbed,
    and the ratio of two implementations' figures in the same round is the fairest A/B.
    With `link`, the servers run in its namespace and the clients talk to them over it.
    """
    servers: dict[str, subprocess.Popen[str]] = {}
    clients: dict[str, RawClient | ZmeshClient] = {}
    impls = [impl for impl in IMPLS if route == "tcp" or impl not in ("zmesh-plain", "raw-curve")]
    best = {impl: (0.0, 0.0, 0.0) for impl in impls}
    rounds: dict[str, list[tuple[float, float, float]]] = {impl: [] for impl in impls}
    cpu: dict[str, list[tuple[float, float]]] = {impl: [] for impl in impls}
    try:
        for number, impl in enumerate(impls):
            if route == "ipc":
                address, own = f"ipc://{workdir}/{impl}-server", f"ipc://{workdir}/{impl}-client"
            elif link is not None:
                address = f"tcp://{link.remote}:{LINK_PORT + number}"
                own = f"tcp://{link.local}:0"
            else:
                address, own = f"tcp://127.0.0.1:{free_port()}", "tcp://127.0.0.1:0"
            servers[impl] = start_server(impl, address, link)
            clients[impl] = IMPLS[impl](address, own)
            round_trips(clients[impl], 0.05)  # connect and warm up
        streamed = 0
        for _ in range(repeat):
            for impl, client in clients.items():
                rt = round_trips(client, seconds)
                msgs = pipelined(client, total, streamed)
                moved = 0.0
                if bulk_bytes:
                    pid = servers[impl].pid
                    sender_cpu, receiver_cpu = _cpu_seconds(), _cpu_seconds(pid)
                    moved = bulk(client, bulk_bytes)
                    gb = max(1, bulk_bytes // BULK_FRAME) * BULK_FRAME / 1e9
                    cpu[impl].append(((_cpu_seconds() - sender_cpu) / gb,
                                      (_cpu_seconds(pid) - receiver_cpu) / gb))
                best[impl] = (max(best[impl][0], rt), max(best[impl][1], msgs),
                              max(best[impl][2], moved))
                rounds[impl].append((rt, msgs, moved))
            streamed += total
    finally:
        for client in clients.values():
            client.close()
        for child in servers.values():
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
            if child.stdout is not None:
                child.stdout.close()
    ROUTE_CPU.clear()
    ROUTE_CPU.update(cpu)
    return best, rounds


ROUTE_CPU: dict[str, list[tuple[float, float]]] = {}
"""Per implementation, (sender, receiver) CPU seconds per GB of each bulk round of the
latest `measure_route_bulk`."""


def crypto_floor(size: int = BULK_FRAME, total: int = 256 << 20) -> float | None:
    """CPU seconds per GB of libsodium's ``crypto_box_afternm`` (XSalsa20-Poly1305, what
    CURVE encrypts each message with) on `size`-byte messages in this process: the least any
    CURVE end can spend per GB. None where pyzmq's bundled libsodium is not found."""
    import ctypes
    import glob

    found = glob.glob(os.path.join(os.path.dirname(zmq.__file__), os.pardir, "pyzmq.libs",
                                   "libsodium*"))
    if not found:
        return None
    sodium = ctypes.CDLL(found[0])
    if sodium.sodium_init() < 0:
        return None
    key, nonce = ctypes.create_string_buffer(32), ctypes.create_string_buffer(24)
    plain, boxed = ctypes.create_string_buffer(size + 32), ctypes.create_string_buffer(size + 32)
    length = ctypes.c_ulonglong(size + 32)
    best = float("inf")
    for _ in range(3):
        started = time.process_time()
        for _ in range(max(1, total // size)):
            sodium.crypto_box_afternm(boxed, plain, length, nonce, key)
        best = min(best, (time.process_time() - started) / (max(1, total // size) * size / 1e9))
    return best


def _spread(ratios: list[float]) -> str:
    """Median [min-max] of per-round ratios."""
    return f"{statistics.median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}]"


def report(
    label: str, workdir: str, repeat: int, seconds: float, total: int, bulk_bytes: int,
    link: Link | None = None,
) -> None:
    """Measure one route and print its rows, plus CURVE on vs off where both ran."""
    route = "ipc" if label == "ipc" else "tcp"
    best, rounds = measure_route_bulk(route, workdir, repeat, seconds, total, bulk_bytes, link)
    raw_rt, raw_msgs, _ = best["raw"]
    if link is not None:
        print(f"\n{label}:")
    bulk_rows = []
    for impl, (rt, msgs, moved) in best.items():
        print(
            f"{route:<6}{impl:<12}{rt:>12,.0f}{rt / raw_rt:>8.2f}"
            f"{msgs:>18,.0f}{msgs / raw_msgs:>8.2f}"
        )
        if moved:
            print(f"{'':<6}{impl:<12}{'bulk':>12}{moved / 1e9:>14.2f} GB/s")
        if impl.startswith("zmesh") and route == "tcp" and moved:
            bulk_rows.append((impl, rt, msgs, moved))
    if len(bulk_rows) != 2:
        return
    (_, rt, msgs, moved), (_, prt, pmsgs, pmoved) = bulk_rows
    print(f"\n{label}, CURVE on vs off (zmesh / zmesh-plain; 1.00 = free, target >= 0.85 "
          "pipelined and >= 0.75 bulk):")
    print(f"  sync round trips   {rt:>12,.0f} vs {prt:>12,.0f} /s   ratio {rt / prt:.2f}")
    print(f"  pipelined 100 B    {msgs:>12,.0f} vs {pmsgs:>12,.0f} /s   "
          f"ratio {msgs / pmsgs:.2f}")
    print(f"  bulk {bulk_bytes >> 20} MiB      {moved / 1e9:>10.2f} GB/s vs "
          f"{pmoved / 1e9:>8.2f} GB/s   ratio {moved / pmoved:.2f}")
    pairs = list(zip(rounds["zmesh"], rounds["zmesh-plain"]))
    print(f"  per-round ratios, median [min-max] of {len(pairs)}: sync "
          f"{_spread([a[0] / b[0] for a, b in pairs])}, pipelined "
          f"{_spread([a[1] / b[1] for a, b in pairs])}, bulk "
          f"{_spread([a[2] / b[2] for a, b in pairs])}; load average now "
          f"{os.getloadavg()[0]:.1f}")
    if "raw-curve" in rounds:
        # The same on and off with bare pyzmq sockets (no zmesh, no authenticator): the
        # share of the cost that is libzmq's CURVE itself, measured in the same rounds.
        raw_pairs = list(zip(rounds["raw-curve"], rounds["raw"]))
        print(f"  bare libzmq CURVE on vs off (raw-curve / raw), per-round median [min-max]: "
              f"sync {_spread([a[0] / b[0] for a, b in raw_pairs])}, pipelined "
              f"{_spread([a[1] / b[1] for a, b in raw_pairs])}, bulk "
              f"{_spread([a[2] / b[2] for a, b in raw_pairs])}")
    # CPU seconds per GB does not depend on how busy the machine is (much): from it, the
    # rate each end could reach with a core of its own (the slower end sets the pace).
    floor = crypto_floor()
    if floor is not None:
        print(f"  libsodium crypto_box_afternm alone: {floor:.2f} core-s/GB "
              f"({1 / floor:.2f} GB/s per core), the least a CURVE end can spend")
    for impl in ("zmesh", "zmesh-plain"):
        sends = [c[0] for c in ROUTE_CPU.get(impl, [])]
        recvs = [c[1] for c in ROUTE_CPU.get(impl, [])]
        if sends:
            print(f"  bulk CPU {impl:<12} sender {_spread(sends)} core-s/GB, receiver "
                  f"{_spread(recvs)} core-s/GB: one core per end would allow "
                  f"{1 / max(statistics.median(sends), statistics.median(recvs)):.2f} GB/s")


IMPLS: dict[str, type[RawClient] | type[ZmeshClient]] = {
    "raw": RawClient, "raw-curve": RawCurveClient, "zmesh": ZmeshClient,
    "zmesh-plain": PlainZmeshClient}


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
    parser.add_argument("--io-threads", type=int, default=None,
                        help="libzmq I/O threads per process (sets ZMESH_IO_THREADS)")
    parser.add_argument("--link-gbit", type=float, default=None,
                        help="also measure tcp over a veth link shaped to this many Gbit/s")
    parser.add_argument("--link-only", action="store_true",
                        help="with --link-gbit: skip the loopback routes")
    parser.add_argument("--no-coalesce", action="store_true",
                        help="zmesh endpoints send every message in a frame of its own")
    parser.add_argument("--serve", nargs=2, metavar=("IMPL", "ADDRESS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.no_coalesce:
        os.environ[COALESCE_ENV] = "0"
    if args.io_threads is not None:
        os.environ["ZMESH_IO_THREADS"] = str(args.io_threads)  # children inherit it
    if args.serve:
        impl, address = args.serve
        if impl in ("raw", "raw-curve"):
            serve_raw(address, curve=impl == "raw-curve")
        else:
            serve_zmesh(address, insecure=impl == "zmesh-plain")
        return
    # One mesh for this process and its server children (they inherit the token).
    from zmesh.security import keys

    creds = keys.ClusterCredentials.generate()
    os.environ[keys.TOKEN_ENV] = creds.token
    keys.install(creds)
    os.environ[RAW_CURVE_ENV] = b" ".join(zmq.curve_keypair()).decode()
    seconds, total = (0.15, 10_000) if args.quick else (0.3, 30_000)
    bulk_bytes = (256 << 20) if args.quick else (1 << 30)
    repeat = args.repeat or (4 if args.quick else 12)
    workdir = tempfile.mkdtemp(prefix="zmb-", dir="/tmp")
    try:
        print(f"{PAYLOAD} B messages, window {WINDOW}, ack every {BATCH}; best of {repeat} rounds; "
              f"coalescing {'on' if _coalesce() else 'off'}; "
              f"io threads {os.environ.get('ZMESH_IO_THREADS', '1')}; load average "
              f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cpus")
        print(
            f"{'route':<6}{'impl':<12}{'sync rt/s':>12}{'ratio':>8}{'pipelined msg/s':>18}{'ratio':>8}"
        )
        for route in () if args.link_only else ("ipc", "tcp"):
            report(route, workdir, repeat, seconds, total, bulk_bytes if route == "tcp" else 0)
        if args.link_gbit:
            with shaped_link(args.link_gbit) as link:
                report(f"tcp over a {args.link_gbit:g} Gbit/s link", workdir, repeat, seconds,
                       total, bulk_bytes, link)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
