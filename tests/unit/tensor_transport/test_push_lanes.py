"""The producer's pushes on one pair: a notice on the pair's header stream, then the
tensors on their key's own tags; at most MAX_ARMED unreceived (past it a push is
refused and the consumer pulls), each let go once received, none after the pair closed."""

from __future__ import annotations

import threading

import pytest

from zmesh.tensor_transport import producer as p
from zmesh.tensor_transport import push

torch = pytest.importorskip("torch")


class _Work:
    def __init__(self, received: threading.Event) -> None:
        self.received = received

    def wait(self, timeout: object = None) -> bool:
        assert self.received.wait(60)
        return True


class _Group:
    """Sends that complete when the test says the consumer received them."""

    def __init__(self) -> None:
        self.sent: list[int] = []
        self.received = threading.Event()

    def send(self, tensors: list, peer: int, tag: int) -> _Work:
        self.sent.append(tag)
        return _Work(self.received)


def _wait(cond, timeout: float = 30.0) -> bool:
    done = threading.Event()
    for _ in range(int(timeout * 100)):
        if cond():
            return True
        done.wait(0.01)
    return cond()


def test_pushes_go_on_their_keys_tags_up_to_the_limit_unreceived():
    lanes, group = push.PushLanes(), _Group()
    key, other = "ab" * 16, "ba" * 16
    p.KEPT.keep(key, [torch.ones(4), torch.zeros(2, dtype=torch.int64)])
    p.KEPT.keep(other, [torch.ones(4)])
    tag, tag2 = p.KEPT.tag(key), p.KEPT.tag(other)
    try:
        assert tag is not None and tag2 is not None and tag != tag2
        assert not lanes.push(key, "ipc:///c")  # no pair with that consumer: no push
        lanes.open("ipc:///c", "pair1", group)
        assert lanes.push(key, "ipc:///c", limit=1)
        # the notice, then its tensors (on its key's tags)
        assert group.sent == [push.TAG_PUSH_HEADER, push.tensor_tag(tag, 0),
                              push.tensor_tag(tag, 1)]
        assert not lanes.push(key, "ipc:///c", limit=1)  # the first is not received yet
        assert lanes.count_armed("ipc:///c") == 1
        assert lanes.push(other, "ipc:///c", limit=2)
        assert group.sent[-1] == push.tensor_tag(tag2, 0)
        assert group.sent[-1] not in {push.tensor_tag(tag, i) for i in range(push.BLOCK)}
        assert max(push.tensor_tag(push.PUSH_TAGS - 1, i) for i in range(push.BLOCK)) < 2**31
        group.received.set()  # the consumer received them: let go
        assert _wait(lambda: lanes.count_armed("ipc:///c") == 0)
        assert lanes.push(key, "ipc:///c")
        assert not lanes.push("cd" * 16, "ipc:///c")  # a key not kept here
        lanes.close("ipc:///c", "pair1")
        assert not lanes.push(key, "ipc:///c")  # the pair ended
    finally:
        p.KEPT.drop(key)
        p.KEPT.drop(other)


class _Refusal:
    """A tensor_push query (`on_push` reads its `arg`)."""

    def __init__(self, key: str, consumer: str) -> None:
        import msgspec

        self.arg = msgspec.msgpack.encode([key, consumer])


def test_refusal_notices_are_bounded_while_the_consumer_takes_no_header():
    """The consumer's header thread is stalled (nothing it is sent completes): each refused
    push would post one more notice, held until received. At most MAX_KEPT wait (the consumer
    remembers no more refusals than that; a reader whose refusal is not sent waits
    PUSH_WAIT_S, then pulls), plus the one header that ends the pair, and nothing after it."""
    lanes, group = push.PushLanes(), _Group()
    lanes.open("ipc:///c", "pair1", group)
    try:
        for i in range(50):
            lanes.on_push("ipc:///caller", _Refusal(f"{i:032x}", "ipc:///c"))  # not kept here
        assert lanes.declined == 50
        lane = lanes._lanes["ipc:///c"]
        assert len(lane.armed) == lane.notices == push.MAX_KEPT
        lanes.end("ipc:///c")  # the consumer dropped the pair: its thread must still end
        assert group.sent[-1] == push.TAG_PUSH_HEADER and len(lane.armed) == push.MAX_KEPT + 1
        lanes.end("ipc:///c")
        lanes.on_push("ipc:///caller", _Refusal(f"{99:032x}", "ipc:///c"))
        assert len(lane.armed) == push.MAX_KEPT + 1  # nothing after the end
        group.received.set()  # the consumer takes them after all: all let go
        assert _wait(lambda: not lane.armed and lane.notices == 0)
    finally:
        lanes.close("ipc:///c", "pair1")


def test_no_push_after_the_end_of_the_pair_was_sent():
    lanes, group = push.PushLanes(), _Group()
    key = "ef" * 16
    p.KEPT.keep(key, [torch.ones(4)])
    lanes.open("ipc:///c", "pair1", group)
    try:
        lanes.end("ipc:///c")
        assert not lanes.push(key, "ipc:///c")  # the consumer's thread ends at that header
        assert group.sent == [push.TAG_PUSH_HEADER]
    finally:
        lanes.close("ipc:///c", "pair1")
        p.KEPT.drop(key)
