"""The order in which a consumer posts a transfer's operations on its pair: with gloo every
receive before the request (the producer's sends land in place), with NCCL the request
first (one CUDA stream runs a pair's operations in order: a receive queued ahead of the
request would wait forever for its answer). Checked on a recording stand-in for the group."""

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
