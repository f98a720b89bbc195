"""The transport conformance suite: every Endpoint implementation must pass all of it.

Parametrised over zmq tcp, ipc and inproc, the in-memory network, and the chaos wrapper
around zmq ipc with every fault at zero. A new transport joins by adding a case to
`TRANSPORTS`.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import transport_fixtures
from transport_fixtures import LeakCheck

from zmesh.errors import TransportError
from zmesh.transports import ChaosEndpoint, Endpoint, MemoryNetwork, open_endpoint

# Shared transport fixtures, requested by name below.
ipc_dir = transport_fixtures.ipc_dir
no_transport_leaks = transport_fixtures.no_transport_leaks

TRANSPORTS = ["tcp", "ipc", "inproc", "memory", "chaos-ipc"]
OpenEndpoint = Callable[..., Endpoint]
_names = itertools.count()


@pytest.fixture(params=TRANSPORTS)
def open_ep(
    request: pytest.FixtureRequest, no_transport_leaks: LeakCheck, ipc_dir: str
) -> Iterator[OpenEndpoint]:
    """`open_ep(**options)` binds a fresh endpoint of the transport under test."""
    kind: str = request.param
    network = MemoryNetwork()
    opened: list[Endpoint] = []

    def open_(**options: Any) -> Endpoint:
        name = f"e{next(_names)}"
        endpoint: Endpoint
        if kind == "tcp":
            endpoint = open_endpoint("tcp://127.0.0.1:0", **options)
        elif kind == "ipc":
            endpoint = open_endpoint(f"ipc://{ipc_dir}/{name}", **options)
        elif kind == "inproc":
            endpoint = open_endpoint(f"inproc://conformance-{name}", **options)
        elif kind == "memory":
            endpoint = open_endpoint(f"mem://{name}", network=network, **options)
        else:
            inner = open_endpoint(f"ipc://{ipc_dir}/{name}", **options)
            endpoint = ChaosEndpoint(inner, seed=1)
        opened.append(endpoint)
        return endpoint

    yield open_
    for endpoint in opened:
        endpoint.close()


def recv_all(endpoint: Endpoint, count: int, timeout: float = 10.0) -> list[tuple[str, list[Any]]]:
    """Receive exactly `count` messages, failing if they do not all come within `timeout`."""
    deadline = time.monotonic() + timeout
    received = []
    while len(received) < count:
        remaining = deadline - time.monotonic()
        message = endpoint.recv(timeout=max(remaining, 0.0))
        if message is None:
            pytest.fail(f"got {len(received)} of {count} messages within {timeout}s")
        received.append(message)
    return received


def test_messages_from_one_sender_arrive_in_send_order(open_ep: OpenEndpoint) -> None:
    a, b = open_ep(), open_ep()
    for i in range(2000):
        a.send(b.address, [i.to_bytes(4, "big")])
    got = [int.from_bytes(bytes(frames[0]), "big") for _, frames in recv_all(b, 2000)]
    assert got == list(range(2000))


def test_received_message_names_the_senders_bound_address(open_ep: OpenEndpoint) -> None:
    a, b = open_ep(), open_ep()
    a.send(b.address, [b"ping"])
    sender, frames = recv_all(b, 1)[0]
    assert sender == a.address
    b.send(sender, [b"pong"])
    assert recv_all(a, 1)[0] == (b.address, [b"pong"])


def test_multipart_frames_arrive_intact_including_empty_ones(open_ep: OpenEndpoint) -> None:
    a, b = open_ep(), open_ep()
    message = [b"", b"a", b"", bytes(range(256)) * 300, b""]
    many = [i.to_bytes(2, "big") * (i % 7) for i in range(500)]
    a.send(b.address, message)
    a.send(b.address, many)
    first, second = recv_all(b, 2)
    assert [bytes(f) for f in first[1]] == message
    assert [bytes(f) for f in second[1]] == many


def test_any_buffer_is_sent_by_its_bytes(open_ep: OpenEndpoint) -> None:
    a, b = open_ep(), open_ep()
    array = np.arange(100, dtype=np.float64)
    big = np.arange(50_000, dtype=np.int32)  # over the zero-copy threshold
    window = memoryview(b"0123456789")[2:5]
    a.send(b.address, [array, bytearray(b"xyz"), window, big])
    _, frames = recv_all(b, 1)[0]
    assert bytes(frames[0]) == array.tobytes()
    assert bytes(frames[1]) == b"xyz"
    assert bytes(frames[2]) == b"234"
    assert np.array_equal(np.frombuffer(frames[3], dtype=np.int32), big)


def test_a_64_mib_frame_arrives_intact(open_ep: OpenEndpoint) -> None:
    a, b = open_ep(), open_ep()
    payload = np.arange(16 * 1024 * 1024, dtype=np.uint32)  # 64 MiB
    a.send(b.address, [b"header", payload])
    _, frames = recv_all(b, 1, timeout=30)[0]
    assert bytes(frames[0]) == b"header"
    assert np.array_equal(np.frombuffer(frames[1], dtype=np.uint32), payload)


def test_twenty_senders_to_one_receiver_each_keep_their_order(open_ep: OpenEndpoint) -> None:
    receiver = open_ep()
    senders = [open_ep() for _ in range(20)]
    for round_ in range(50):
        for sender in senders:
            sender.send(receiver.address, [round_.to_bytes(2, "big")])
    per_sender: dict[str, list[int]] = {}
    for sender_address, frames in recv_all(receiver, 20 * 50):
        per_sender.setdefault(sender_address, []).append(int.from_bytes(bytes(frames[0]), "big"))
    assert set(per_sender) == {s.address for s in senders}
    assert all(seq == list(range(50)) for seq in per_sender.values())


def test_recv_returns_none_when_nothing_arrives_before_the_timeout(open_ep: OpenEndpoint) -> None:
    a = open_ep()
    started = time.monotonic()
    assert a.recv(timeout=0.05) is None
    assert a.recv(timeout=0) is None
    assert time.monotonic() - started >= 0.04


def test_wake_from_another_thread_unblocks_a_blocked_recv(open_ep: OpenEndpoint) -> None:
    a = open_ep()
    # A wake that lands before recv blocks must still end that recv (no lost wake-ups),
    # so the thread needs no coordination with the exact moment recv starts waiting.
    waker = threading.Thread(target=a.wake)
    started = time.monotonic()
    waker.start()
    assert a.recv(timeout=20) is None
    waker.join()
    assert time.monotonic() - started < 10
    # The wake was consumed: the next recv waits for its own timeout again.
    assert a.recv(timeout=0.02) is None


def test_a_pending_wake_costs_at_most_one_empty_recv(open_ep: OpenEndpoint) -> None:
    a, b = open_ep(), open_ep()
    a.send(b.address, [b"m"])
    b.wake()
    results = [b.recv(timeout=10), b.recv(timeout=10)]
    assert (a.address, [b"m"]) in results
    assert results.count(None) <= 1


def test_frame_over_the_senders_cap_is_rejected_with_its_size(open_ep: OpenEndpoint) -> None:
    a, b = open_ep(max_frame_size=1024), open_ep()
    with pytest.raises(TransportError, match="1025 bytes.*1024"):
        a.send(b.address, [b"ok", b"x" * 1025])
    a.send(b.address, [b"x" * 1024])
    assert bytes(recv_all(b, 1)[0][1][0]) == b"x" * 1024


def test_frame_over_the_receivers_cap_never_reaches_it(open_ep: OpenEndpoint) -> None:
    small, big, other = open_ep(max_frame_size=1024), open_ep(), open_ep()
    big.send(small.address, [b"x" * 4096])
    other.send(small.address, [b"fine"])
    assert recv_all(small, 1) == [(other.address, [b"fine"])]
    assert small.recv(timeout=0.2) is None


def test_empty_message_is_rejected(open_ep: OpenEndpoint) -> None:
    a, b = open_ep(), open_ep()
    with pytest.raises(TransportError, match="no frames"):
        a.send(b.address, [])


def test_non_buffer_frame_is_rejected_by_type(open_ep: OpenEndpoint) -> None:
    a, b = open_ep(), open_ep()
    with pytest.raises(TransportError, match="str"):
        a.send(b.address, ["text is not a buffer"])  # type: ignore[list-item]


def test_address_of_another_scheme_is_unroutable(open_ep: OpenEndpoint) -> None:
    a = open_ep()
    with pytest.raises(TransportError):
        a.send("bogus://nowhere", [b"x"])


def test_send_after_disconnect_opens_a_new_connection(open_ep: OpenEndpoint) -> None:
    a, b = open_ep(), open_ep()
    a.send(b.address, [b"1"])
    assert recv_all(b, 1)[0][1] == [b"1"]
    a.disconnect(b.address)
    a.disconnect("tcp://127.0.0.1:1")  # never connected: nothing to do
    a.send(b.address, [b"2"])
    assert recv_all(b, 1)[0][1] == [b"2"]


def test_closed_endpoint_refuses_send_recv_and_disconnect(open_ep: OpenEndpoint) -> None:
    a, b = open_ep(), open_ep()
    a.send(b.address, [b"before"])
    a.close()
    assert a.closed
    with pytest.raises(TransportError, match="closed"):
        a.send(b.address, [b"after"])
    with pytest.raises(TransportError, match="closed"):
        a.recv(timeout=0)
    with pytest.raises(TransportError, match="closed"):
        a.disconnect(b.address)
    a.close()
    a.wake()  # a late wake from another thread must not blow up


def test_closed_receiver_refuses_recv_even_with_messages_queued(open_ep: OpenEndpoint) -> None:
    a, b = open_ep(), open_ep()
    a.send(b.address, [b"queued"])
    b.close()
    with pytest.raises(TransportError, match="closed"):
        b.recv(timeout=0)
