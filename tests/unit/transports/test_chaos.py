"""The chaos wrapper: seeded faults are reproducible and their rates roughly honoured."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import transport_fixtures
from transport_fixtures import LeakCheck

from zmesh.transports import ChaosEndpoint, MemoryNetwork

no_transport_leaks = transport_fixtures.no_transport_leaks
N = 2000


@pytest.fixture
def network(no_transport_leaks: LeakCheck) -> Iterator[MemoryNetwork]:
    net = MemoryNetwork()
    yield net
    net.close()


def run(
    network: MemoryNetwork, name: str, seed: int, **faults: float
) -> tuple[ChaosEndpoint, list[int]]:
    """Send N numbered messages through a fresh chaos endpoint; return it and what arrived."""
    sender = ChaosEndpoint(network.open(f"mem://{name}-s"), seed, hold=60.0, record=True, **faults)  # type: ignore[arg-type]
    receiver = network.open(f"mem://{name}-r")
    for i in range(N):
        sender.send(receiver.address, [i.to_bytes(4, "big")])
    sender.flush()  # release whatever is still held back, without waiting for `hold`
    received = []
    while (message := receiver.recv(timeout=0)) is not None:
        received.append(int.from_bytes(message[1][0], "big"))
    return sender, received


FAULTS = {"drop": 0.1, "duplicate": 0.1, "reorder": 0.1}


def test_same_seed_and_same_sends_give_every_message_the_same_fate(network: MemoryNetwork) -> None:
    first, got_first = run(network, "a", seed=42, **FAULTS)
    second, got_second = run(network, "b", seed=42, **FAULTS)
    assert got_first == got_second
    assert [(f.dropped, f.copies, f.held_back) for f in first.fates or []] == [
        (f.dropped, f.copies, f.held_back) for f in second.fates or []
    ]
    assert first.stats == second.stats


def test_different_seeds_give_different_fates(network: MemoryNetwork) -> None:
    _, got_first = run(network, "a", seed=1, **FAULTS)
    _, got_second = run(network, "b", seed=2, **FAULTS)
    assert got_first != got_second


def test_a_fault_rate_does_not_shift_the_draws_of_the_others(network: MemoryNetwork) -> None:
    only_drop, _ = run(network, "a", seed=5, drop=0.2)
    drop_and_dup, _ = run(network, "b", seed=5, drop=0.2, duplicate=0.5)
    assert [f.dropped for f in only_drop.fates or []] == [
        f.dropped for f in drop_and_dup.fates or []
    ]


def test_drop_rate_is_roughly_honoured(network: MemoryNetwork) -> None:
    sender, received = run(network, "a", seed=3, drop=0.3)
    assert 0.24 * N < N - len(received) < 0.36 * N  # 5 standard deviations either side
    assert received == sorted(set(received))  # dropping alone never reorders or repeats
    assert sender.stats["dropped"] == N - len(received)


def test_duplicate_rate_is_roughly_honoured(network: MemoryNetwork) -> None:
    sender, received = run(network, "a", seed=4, duplicate=0.25)
    extra = len(received) - N
    assert 0.19 * N < extra < 0.31 * N
    assert sorted(set(received)) == list(range(N))
    assert received == sorted(received)  # copies follow their original
    assert sender.stats["duplicated"] == extra


def test_reordered_messages_arrive_swapped_with_the_next_one(network: MemoryNetwork) -> None:
    sender, received = run(network, "a", seed=6, reorder=0.2)
    assert sorted(received) == list(range(N))  # nothing lost or repeated
    swaps = sum(1 for x, y in zip(received, received[1:]) if x > y)
    assert swaps == sender.stats["reordered"]
    assert 0.1 * N < swaps < 0.25 * N


def test_delayed_message_goes_out_from_a_later_send_or_recv_once_due(
    network: MemoryNetwork,
) -> None:
    sender = ChaosEndpoint(network.open("mem://s"), seed=0, delay=(0.02, 0.03))
    receiver = network.open("mem://r")
    sent_at = time.monotonic()
    sender.send("mem://r", [b"late"])
    assert receiver.recv(timeout=0) is None
    assert sender.pending() == 1
    assert sender.recv(timeout=0.2) is None  # the sender's loop keeps running meanwhile
    assert sender.pending() == 0
    assert receiver.recv(timeout=0) == ("mem://s", [b"late"])
    assert time.monotonic() - sent_at >= 0.02


def test_wake_ends_a_recv_that_is_waiting_on_delay_timers(network: MemoryNetwork) -> None:
    sender = ChaosEndpoint(network.open("mem://s"), seed=0, delay=(30.0, 30.0))
    network.open("mem://r")
    sender.send("mem://r", [b"much later"])
    waker = threading.Thread(target=sender.wake)
    started = time.monotonic()
    waker.start()
    assert sender.recv(timeout=20) is None
    waker.join()
    assert time.monotonic() - started < 10


def test_close_discards_pending_messages_and_closes_the_inner_endpoint(
    network: MemoryNetwork,
) -> None:
    inner = network.open("mem://s")
    sender = ChaosEndpoint(inner, seed=0, delay=(30.0, 30.0))
    network.open("mem://r")
    sender.send("mem://r", [b"never"])
    sender.close()
    assert inner.closed and sender.closed
    assert sender.pending() == 0


def test_without_faults_messages_pass_straight_through(network: MemoryNetwork) -> None:
    sender, received = run(network, "a", seed=9)
    assert received == list(range(N))
    assert sender.pending() == 0


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("drop", 1.5, "drop rate must be within"),
        ("duplicate", -0.1, "duplicate rate must be within"),
        ("delay", (0.2, 0.1), "0 <= min <= max"),
        ("hold", -1.0, "hold must be"),
    ],
)
def test_invalid_fault_settings_are_refused(
    network: MemoryNetwork, option: str, value: object, message: str
) -> None:
    inner = network.open("mem://x")
    with pytest.raises(ValueError, match=message):
        ChaosEndpoint(inner, seed=0, **{option: value})  # type: ignore[arg-type]
