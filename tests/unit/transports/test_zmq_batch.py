"""Coalescing small messages into batches (`transports.zmq_batch`): the format, its checks,
and a coalescing endpoint's order, flush triggers and robustness against malformed batches."""

from __future__ import annotations

import random
import struct
import threading
from collections.abc import Iterator

import pytest
import zmq
from runtime_fixtures import wait_until

from zmesh.errors import TransportError
from zmesh.transports import open_endpoint
from zmesh.transports import zmq_batch as zb
from zmesh.transports.zmq_transport import ZmqEndpoint


def _batch(messages: list[list[bytes]]) -> bytes:
    frames: list[bytes] = []
    lengths: list[int] = []
    for message in messages:
        for i, frame in enumerate(message):
            frames.append(frame)
            lengths.append(len(frame) | (0x80000000 if i < len(message) - 1 else 0))
    return zb.pack(frames, lengths)


# -- the format ------------------------------------------------------------------------------


def test_a_batch_unpacks_into_the_same_messages_in_order() -> None:
    messages = [[b"a"], [b"bb", b"", b"ccc"], [b"d" * 3000], [b"e", b"f"]]
    assert zb.unpack(_batch(messages)) == messages
    assert zb.unpack(memoryview(_batch(messages))) == messages  # a zero-copy view too
    assert zb.unwrap([b"", _batch(messages)]) == messages
    assert zb.count([b"", _batch(messages)]) == 4 and zb.count([b"x"]) == 1


def test_an_escaped_message_unwraps_to_itself() -> None:
    assert zb.escape([b"", b"x"]) == [b"", b"", b"", b"x"]
    assert zb.unwrap(zb.escape([b"", b"x"])) == [[b"", b"x"]]
    assert zb.unwrap(zb.escape([b""])) == [[b""]]


def _malformed() -> dict[str, bytes]:
    good = _batch([[b"one"], [b"two"]])
    head = struct.pack("<BI", zb.VERSION, 2)
    return {
        "empty": b"",
        "short head": good[:3],
        "no messages": struct.pack("<BI", zb.VERSION, 0),
        "bad version": bytes([zb.VERSION + 1]) + good[1:],
        "truncated lengths": head + struct.pack("<I", 3),
        "length past the end": head + struct.pack("<2I", 3, 99) + b"onetwo",
        "bytes left over": good + b"x",
        "truncated data": good[:-1],
        "last frame says more": head + struct.pack("<2I", 3, 3 | 0x80000000) + b"onetwo",
        "nested (empty first frame)": head + struct.pack("<2I", 0, 3) + b"two",
        "huge count": struct.pack("<BI", zb.VERSION, 0xFFFFFFFF) + b"\0" * 64,
        "count over the cap": struct.pack("<BI", zb.VERSION, zb.MAX_FRAMES + 1)
        + struct.pack("<I", 1) * (zb.MAX_FRAMES + 1) + b"x" * (zb.MAX_FRAMES + 1),
    }


@pytest.mark.parametrize("case", sorted(_malformed()))
def test_a_malformed_batch_is_refused(case: str) -> None:
    payload = _malformed()[case]
    assert zb.unpack(payload) is None
    envelope = [b"", payload] if payload else [b"", b""]
    assert zb.unwrap(envelope) is None
    assert zb.count(envelope) == 1


def test_random_bytes_never_raise() -> None:
    rng = random.Random(7)
    good = _batch([[b"x" * rng.randrange(1, 50)] for _ in range(20)])
    for _ in range(20_000):
        data = bytearray(good)
        for _ in range(rng.randrange(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        cut = bytes(data[: rng.randrange(len(data) + 1)])
        for payload in (bytes(data), cut, bytes(rng.randrange(256) for _ in range(9))):
            result = zb.unpack(payload)
            assert result is None or all(m and len(m[0]) for m in result)


# -- a coalescing endpoint -------------------------------------------------------------------


@pytest.fixture
def pair() -> Iterator[tuple[ZmqEndpoint, ZmqEndpoint]]:
    sender = open_endpoint("tcp://127.0.0.1:0", coalesce=True)
    receiver = open_endpoint("tcp://127.0.0.1:0")
    assert isinstance(sender, ZmqEndpoint) and isinstance(receiver, ZmqEndpoint)
    try:
        yield sender, receiver
    finally:
        sender.close()
        receiver.close()


def _take(receiver: ZmqEndpoint, n: int, timeout: float = 30) -> list[tuple[str, list[bytes]]]:
    got = []
    for _ in range(n):
        item = receiver.recv(timeout)
        assert item is not None, f"only {len(got)} of {n} messages came"
        got.append((item[0], [bytes(f) for f in item[1]]))
    return got


def test_mixed_small_and_large_messages_keep_their_order(
        pair: tuple[ZmqEndpoint, ZmqEndpoint]) -> None:
    sender, receiver = pair
    rng = random.Random(3)
    sent = []
    for i in range(600):
        size = rng.choice([1, 10, 100, 3000, 5000, 70_000])
        parts = rng.choice([1, 1, 1, 2, 3])
        message = [b"%d:" % i + b"x" * size] + [b"p" * rng.randrange(0, 40)] * (parts - 1)
        if i % 97 == 5:
            message = [b"", b"escaped %d" % i]  # an empty first frame goes escaped
        sent.append(message)
        sender.send(receiver.address, message)
    sender.flush()
    got = _take(receiver, len(sent))
    assert [frames for _, frames in got] == sent
    assert {peer for peer, _ in got} == {sender.address}
    assert receiver.dropped_malformed == 0


def test_several_peers_each_get_their_own_messages_in_order() -> None:
    sender = open_endpoint("tcp://127.0.0.1:0", coalesce=True)
    receivers = [open_endpoint("tcp://127.0.0.1:0") for _ in range(3)]
    try:
        for i in range(300):
            sender.send(receivers[i % 3].address, [b"%d" % i])
        assert sender.recv(0) is None  # a receive sends what is held (nothing is waiting)
        for index, receiver in enumerate(receivers):
            got = _take(receiver, 100)  # type: ignore[arg-type]
            assert [f[0] for _, f in got] == [b"%d" % i for i in range(index, 300, 3)]
    finally:
        sender.close()
        for receiver in receivers:
            receiver.close()


def _arrived(receiver: ZmqEndpoint, timeout: float = 0.5) -> list[bytes]:
    got = []
    while (item := receiver.recv(timeout)) is not None:
        got.append(bytes(item[1][0]))
        timeout = 0.5
    return got


def test_a_lone_message_goes_at_once_and_the_rest_wait_for_a_trigger(
        pair: tuple[ZmqEndpoint, ZmqEndpoint]) -> None:
    sender, receiver = pair
    sender.send(receiver.address, [b"first"])
    assert receiver.recv(30) == (sender.address, [b"first"])  # no flush needed
    sender.send(receiver.address, [b"held 1"])
    sender.send(receiver.address, [b"held 2"])
    assert _arrived(receiver) == []  # held until the sender receives, flushes or closes
    assert sender.recv(0) is None
    assert _take(receiver, 2) == [(sender.address, [b"held 1"]), (sender.address, [b"held 2"])]
    # after that flush, the next one is first again
    sender.send(receiver.address, [b"again"])
    assert receiver.recv(30) == (sender.address, [b"again"])


@pytest.mark.parametrize("trigger", ["large", "count", "bytes", "flush", "disconnect", "close"])
def test_each_flush_trigger_sends_what_is_held(
        pair: tuple[ZmqEndpoint, ZmqEndpoint], trigger: str) -> None:
    sender, receiver = pair
    sender.send(receiver.address, [b"first"])
    held = [b"h%d" % i for i in range(5)]
    for frame in held:
        sender.send(receiver.address, [frame])
    expected = [b"first", *held]
    if trigger == "large":
        sender.send(receiver.address, [b"L" * zb.SMALL])
        expected.append(b"L" * zb.SMALL)
    elif trigger == "count":
        more = [b"c%d" % i for i in range(zb.MAX_BATCH - len(held))]
        for frame in more:
            sender.send(receiver.address, [frame])
        expected += more
    elif trigger == "bytes":
        more = [b"%04d" % i + b"b" * 2000 for i in range(40)]  # > MAX_BATCH_BYTES in all
        for frame in more:
            sender.send(receiver.address, [frame])
        # what fits in one batch goes; the rest waits in the next one
        fits = (zb.MAX_BATCH_BYTES - 5 - sum(len(h) + 4 for h in held)) // (2004 + 4)
        assert fits < len(more)
        expected += more[:fits]
    elif trigger == "flush":
        sender.flush()
    elif trigger == "disconnect":
        sender.disconnect(receiver.address)
    else:
        sender.close()
    got = [f[0] for _, f in _take(receiver, len(expected))]
    assert got == expected
    if trigger in ("count", "bytes"):
        assert _arrived(receiver, 0.3) == []  # nothing else came


def test_answers_to_a_received_batch_are_held_until_the_batch_is_handed_out(
        pair: tuple[ZmqEndpoint, ZmqEndpoint]) -> None:
    sender, receiver = pair
    receiver.coalesce = True  # so that its questions come as a batch
    n = 40
    receiver.send(sender.address, [b"q first"])  # (alone)
    for i in range(n):
        receiver.send(sender.address, [b"q%d" % i])  # these go as one batch
    receiver.flush()
    assert sender.recv(30) == (receiver.address, [b"q first"])
    sender.send(receiver.address, [b"a first"])  # the first answer goes at once
    assert receiver.recv(30) == (sender.address, [b"a first"])
    for i in range(n):
        item = sender.recv(30)
        assert item == (receiver.address, [b"q%d" % i])
        # the first answer of this turn goes at once, the rest wait for the batch to be out
        sender.send(receiver.address, [b"a%d" % i])
        if i == 1:
            assert _arrived(receiver, 0.3) == [b"a0"]
    assert sender.recv(0.2) is None  # the batch is out: what was held goes
    got = [f[0] for _, f in _take(receiver, n - 1)]
    assert got == [b"a%d" % i for i in range(1, n)]
    assert sender.batches_sent >= 1


def test_a_synchronous_peer_is_never_kept_waiting(pair: tuple[ZmqEndpoint, ZmqEndpoint]) -> None:
    """Requests that wait on the socket do not keep answers held: each answer goes before
    the server's next receive (here both ends in one thread, which deadlocks otherwise)."""
    client, server = pair
    server.coalesce = True
    for i in range(200):
        client.send(server.address, [b"r%d" % i])
        peer, frames = server.recv(30) or ("", [])
        server.send(peer, frames)
        assert client.recv(30) == (server.address, [b"r%d" % i])


def test_an_endpoint_that_does_not_coalesce_sends_each_message_alone() -> None:
    with open_endpoint("tcp://127.0.0.1:0") as a, open_endpoint("tcp://127.0.0.1:0") as b:
        assert isinstance(a, ZmqEndpoint) and not a.coalesce
        for i in range(3):
            a.send(b.address, [b"%d" % i])
        assert [f[0] for _, f in _take(b, 3)] == [b"0", b"1", b"2"]  # type: ignore[arg-type]


def test_a_thread_sender_escapes_an_empty_first_frame(
        pair: tuple[ZmqEndpoint, ZmqEndpoint]) -> None:
    sender, receiver = pair
    errors: list[BaseException] = []

    def run() -> None:
        try:
            ts = sender.thread_sender()
            for i in range(50):
                ts.send(receiver.address, [b"", b"t%d" % i] if i % 2 else [b"t%d" % i])
            ts.close()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(60)
    assert not errors
    got = [f for _, f in _take(receiver, 50)]
    assert got == [[b"", b"t%d" % i] if i % 2 else [b"t%d" % i] for i in range(50)]


def test_frames_are_still_capped(pair: tuple[ZmqEndpoint, ZmqEndpoint]) -> None:
    sender, receiver = pair
    sender.max_frame_size = 10
    with pytest.raises(TransportError, match="over the cap"):
        sender.send(receiver.address, [b"x" * 11])


# -- malformed batches against a live endpoint ------------------------------------------------


def test_malformed_batches_from_an_authenticated_peer_are_dropped_and_it_stays_up(
        pair: tuple[ZmqEndpoint, ZmqEndpoint], caplog: pytest.LogCaptureFixture) -> None:
    """An authenticated but buggy peer (this process's own key, so no proof is needed)
    sends envelopes of every malformed kind and random bytes: each is dropped and counted,
    the receiver stays up, and its good messages around them still arrive in order."""
    sender, receiver = pair
    sender.send(receiver.address, [b"hello"])
    assert receiver.recv(30) == (sender.address, [b"hello"])
    dealer = sender._peers[receiver.address]  # its raw connection: frames go as they are
    rng = random.Random(11)
    bad: list[list[bytes]] = [[b"", payload] for payload in _malformed().values() if payload]
    bad += [[b""], [b"", b""], [b"", b"x", b"y"]]
    good = _batch([[b"x" * rng.randrange(1, 40)] for _ in range(10)])
    for _ in range(3000):
        data = bytearray(good)
        data[rng.randrange(len(data))] = rng.randrange(256)
        bad.append([b"", bytes(data[: rng.randrange(1, len(data) + 1)])])
    expected: list[list[bytes]] = []
    malformed = 0
    for i, frames in enumerate(bad):
        valid = zb.unwrap(frames)  # (some random mutations are still well formed)
        if valid is None:
            malformed += 1
        else:
            expected += valid
        dealer.send_multipart(frames)
        if i % 100 == 0:
            dealer.send_multipart([b"ok %d" % i])
            expected.append([b"ok %d" % i])
    dealer.send_multipart([b"", _batch([[b"last"], [b"one", b"two"]])])
    expected += [[b"last"], [b"one", b"two"]]
    got = [f for _, f in _take(receiver, len(expected))]
    assert got == expected
    assert receiver.dropped_malformed == malformed > 3000 // 2
    assert "malformed batch" in caplog.text
    assert caplog.text.count("malformed batch") <= 20  # rate-limited


def test_batches_stay_within_a_small_max_frame_size() -> None:
    """A batch never outgrows the frame cap (the receiver's libzmq would drop the link)."""
    with open_endpoint("tcp://127.0.0.1:0", coalesce=True, max_frame_size=1000) as a, \
            open_endpoint("tcp://127.0.0.1:0", max_frame_size=1000) as b:
        assert isinstance(a, ZmqEndpoint) and isinstance(b, ZmqEndpoint)
        sent = [b"%03d" % i + b"s" * 97 for i in range(60)]
        for frame in sent:
            a.send(b.address, [frame])
        a.flush()
        assert [f[0] for _, f in _take(b, len(sent))] == sent
        assert a.batches_sent >= 6 and a.batched_messages == len(sent) - 1


def test_held_messages_go_before_a_receive_blocks_after_dropping_what_was_waiting(
        pair: tuple[ZmqEndpoint, ZmqEndpoint]) -> None:
    """A receive holds the batches while something waits inbound; if what waited is
    dropped (a malformed envelope here; also a proof challenge, a refused sender), the
    receive must send them before it blocks, not when the next message comes."""
    sender, receiver = pair  # the sender coalesces; the receiver answers on a raw socket
    receiver.send(sender.address, [b"hi"])
    assert sender.recv(30) == (receiver.address, [b"hi"])
    sender.send(receiver.address, [b"first"])  # goes at once
    sender.send(receiver.address, [b"held"])  # held for the sender's next receive
    receiver._peers[sender.address].send_multipart([b"", b"junk"])  # waits at the sender
    assert wait_until(lambda: sender._router.get(zmq.EVENTS) & zmq.POLLIN, timeout=30)
    got: list[object] = []
    blocked = threading.Thread(target=lambda: got.append(sender.recv(None)))
    blocked.start()
    try:
        assert _take(receiver, 2) == [(sender.address, [b"first"]), (sender.address, [b"held"])]
    finally:
        sender.wake()
        blocked.join(60)
    assert got == [None] and sender.dropped_malformed == 1
