"""The order of a transfer's operations on a pair. The consumer: with gloo every
receive before the request (the producer's sends land in place), with NCCL the request
first (one CUDA stream runs a pair's operations in order: a receive queued ahead of the
request would wait forever for its answer). The producer: with gloo the next request's
receive before the data, with NCCL after the sends. Checked on recording stand-ins for the
group."""

from __future__ import annotations

import threading

import pytest

from zmesh.tensor_transport import consumer
from zmesh.tensor_transport import producer as p

torch = pytest.importorskip("torch")


class _Done:
    def wait(self) -> bool:
        return True


class _RecordingGroup:
    """Records (op, tag) in call order; a receive of the status reads STATUS_OK."""

    def __init__(self) -> None:
        self.ops: list[tuple[str, int]] = []

    def send(self, tensors: list, peer: int, tag: int) -> _Done:
        self.ops.append(("send", tag))
        return _Done()

    def recv(self, tensors: list, peer: int, tag: int) -> _Done:
        self.ops.append(("recv", tag))
        if tag == p.TAG_STATUS:
            tensors[0].fill_(p.STATUS_OK)
        return _Done()


class _FakePair:
    def __init__(self) -> None:
        self.pair_id = "0" * 32
        self.pg = _RecordingGroup()
        self.fresh = False
        self.lock = threading.Lock()
        self.request = torch.zeros(p.REQUEST_BYTES, dtype=torch.uint8)
        self.request_host = self.request.numpy()
        self.ctl = "cpu"
        self.request_sent = self.request
        self.status = torch.empty(1, dtype=torch.int64)


@pytest.mark.parametrize("backend", ["gloo", "nccl"])
def test_receives_and_request_are_posted_in_the_backends_order(backend):
    pair = _FakePair()
    consumer._pairs[("addr", backend)] = pair  # type: ignore[assignment]
    try:
        metas = [([4], "float32"), ([2, 3], "int64")]
        out = consumer.fetch("addr", backend, "k" * 32, metas, "cpu", "producer")
    finally:
        consumer._pairs.pop(("addr", backend), None)
    assert [tuple(t.shape) for t in out] == [(4,), (2, 3)]
    assert [t.dtype for t in out] == [torch.float32, torch.int64]
    receives = [("recv", p.TAG_STATUS), ("recv", p.TAG_FIRST_TENSOR),
                ("recv", p.TAG_FIRST_TENSOR + 1)]
    request = [("send", p.TAG_REQUEST)]
    assert pair.pg.ops == (request + receives if backend == "nccl" else receives + request)
    # the sizes in the request are what the receives were posted for
    assert p.decode_request(pair.request_host.tobytes()) == ("k" * 32, 2, [16, 48])


class _OneRequestGroup(_RecordingGroup):
    """The producer's side: the first receive of a request reads `raw`; waiting on a second
    one ends the pair (as a consumer that went away)."""

    def __init__(self, raw: bytes) -> None:
        super().__init__()
        self.raw = raw
        self.requests = 0

    def recv(self, tensors: list, peer: int, tag: int) -> _Done:
        self.ops.append(("recv", tag))
        if tag != p.TAG_REQUEST:
            return _Done()
        self.requests += 1
        if self.requests == 1:
            tensors[0].numpy()[:] = memoryview(self.raw)
            return _Done()
        return _Gone()


class _Gone:
    def wait(self) -> bool:
        raise RuntimeError("connection closed by peer")


@pytest.mark.parametrize("backend", ["gloo", "nccl"])
def test_the_producer_posts_the_next_request_in_the_backends_order(backend, monkeypatch):
    """gloo: the next request's receive before the data (its notice reaches the consumer
    ahead of the data); NCCL: after the sends (one stream, in order)."""
    kept = p.KeptTensors()
    tensor = torch.arange(4, dtype=torch.float32)
    kept.keep("k" * 32, [tensor])
    raw = bytearray(p.REQUEST_BYTES)
    p.encode_request(raw, "k" * 32, [tensor.nbytes])
    group = _OneRequestGroup(bytes(raw))
    monkeypatch.setattr(p, "pair_group", lambda pair_id, rank, backend: group)
    monkeypatch.setattr(p, "control_device", lambda backend: "cpu")
    kept._serve("0" * 32, backend)  # returns when the second request's wait fails
    sends = [("send", p.TAG_STATUS), ("send", p.TAG_FIRST_TENSOR)]
    ask = [("recv", p.TAG_REQUEST)]
    expected = ask + (ask + sends if backend == "gloo" else sends + ask)
    assert group.ops == expected
    assert kept.sent_bytes == tensor.nbytes
