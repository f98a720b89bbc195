"""A coalescing endpoint whose due batch meets its peer's full send queue (`sndhwm`): what
`send` accepted is held back and goes when the queue has room, never dropped while the peer
is merely slow; nothing to that peer passes it; it is lost (counted) only with the peer's
connection. The peer here is an ipc address nobody is bound to yet, so the queue (sndhwm=1)
stays full until the receiver binds and reads."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from zmesh.errors import TransportError
from zmesh.transports import open_endpoint
from zmesh.transports import zmq_batch as zb
from zmesh.transports.zmq_transport import ZmqEndpoint


@pytest.fixture
def sender(tmp_path: Path) -> Iterator[ZmqEndpoint]:
    endpoint = open_endpoint(f"ipc://{tmp_path}/sender", coalesce=True, sndhwm=1)
    assert isinstance(endpoint, ZmqEndpoint)
    try:
        yield endpoint
    finally:
        endpoint.close()


def _fill(sender: ZmqEndpoint, to: str, held: list[bytes]) -> None:
    """One message fills `to`'s queue; `held` are accepted and held; a flush meets the
    full queue."""
    sender.send(to, [b"first"])  # goes at once: the queue (sndhwm=1) is full
    for frame in held:
        sender.send(to, [frame])  # accepted, held
    sender.flush()


def _serve(address: str, n: int, got: list[list[bytes]]) -> threading.Thread:
    """A receiver bound at `address` (the slow peer coming up) in a thread of its own: it
    takes `n` messages, then answers the last sender "ack"."""
    receiver = open_endpoint(address)

    def run() -> None:
        try:
            for _ in range(n):
                item = receiver.recv(60)
                if item is None:
                    return
                got.append([bytes(f) for f in item[1]])
            receiver.send(item[0], [b"ack"])
            receiver.flush()
        finally:
            receiver.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _until_ack(sender: ZmqEndpoint, thread: threading.Thread) -> list[bytes] | None:
    """The sender's loop: receive (which also sends what waited for room) until the ack."""
    for _ in range(100):
        item = sender.recv(60)
        if item is not None:
            return [bytes(f) for f in item[1]]
        if not thread.is_alive():
            return None
    return None


def test_held_messages_that_meet_a_full_queue_go_when_it_has_room(sender, tmp_path):
    to = f"ipc://{tmp_path}/slow"
    _fill(sender, to, [b"held 1", b"held 2"])
    assert sender.dropped_unflushed == 0
    # nothing passes what is held back: a small, a large and a multi-frame message are
    # refused as an unbuffered send to a full queue is (nothing of theirs goes)
    for refused in ([b"small"], [b"L" * (zb.SMALL + 1)], [b"a", b"b"]):
        with pytest.raises(TransportError, match="is full"):
            sender.send(to, refused)
    got: list[list[bytes]] = []
    thread = _serve(to, 3, got)
    try:
        assert _until_ack(sender, thread) == [b"ack"]
    finally:
        thread.join(60)
    assert got == [[b"first"], [b"held 1"], [b"held 2"]]
    assert sender.dropped_unflushed == 0
    assert sender.batches_sent == 1 and sender.batched_messages == 2


def test_a_batch_full_when_the_queue_is_full_keeps_what_it_accepted(sender, tmp_path):
    to = f"ipc://{tmp_path}/slow"
    held = [b"%d" % i for i in range(zb.MAX_BATCH)]  # the last one makes the batch due
    sender.send(to, [b"first"])
    for frame in held:
        sender.send(to, [frame])  # all accepted
    with pytest.raises(TransportError, match="is full"):
        sender.send(to, [b"one too many"])
    got: list[list[bytes]] = []
    thread = _serve(to, 1 + len(held), got)
    try:
        assert _until_ack(sender, thread) == [b"ack"]
    finally:
        thread.join(60)
    assert got == [[b"first"]] + [[frame] for frame in held]
    assert sender.dropped_unflushed == 0


def test_held_back_messages_are_lost_only_with_the_connection_and_counted(sender, tmp_path,
                                                                          caplog):
    to = f"ipc://{tmp_path}/slow"
    _fill(sender, to, [b"held 1", b"held 2"])
    assert sender.recv(0) is None  # a receive retries; still no room, nothing lost
    assert sender.dropped_unflushed == 0
    with caplog.at_level(logging.WARNING, logger="zmesh.transports.zmq"):
        sender.disconnect(to)
    assert sender.dropped_unflushed == 2
    assert "dropped 2 held message(s)" in caplog.text
    other = f"ipc://{tmp_path}/other"
    _fill(sender, other, [b"held 3"])
    sender.close()
    assert sender.dropped_unflushed == 3
