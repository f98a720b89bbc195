"""The order of a transfer's operations on a pair. The consumer: with gloo every
receive before the request (the producer's sends land in place), with NCCL the request
first (one CUDA stream runs a pair's operations in order: a receive queued ahead of the
request would wait forever for its answer). The producer: the next request's receive after
the sends. With gloo no status message goes with a transfer that goes well: only "gone" is
sent, into a receive the consumer keeps posted. Checked on recording stand-ins for the
group."""

from __future__ import annotations

import datetime
import threading
import time
from typing import Any

import pytest

from zmesh.tensor_transport import consumer
from zmesh.tensor_transport import producer as p

torch = pytest.importorskip("torch")


class _Done:
    def wait(self, timeout: object = None) -> bool:
        return True


class _RecordingGroup:
    """Records (op, tag) in call order. A producer stand-in: with NCCL the status receive
    reads STATUS_OK; with `gone` set, a request makes the (standing) status receive read
    STATUS_GONE, as a producer's "gone" lands there before the zeros."""

    def __init__(self, backend: str = "gloo") -> None:
        self.ops: list[tuple[str, int]] = []
        self.backend = backend
        self.gone = False
        self.status: list = []

    def send(self, tensors: list, peer: int, tag: int) -> _Done:
        self.ops.append(("send", tag))
        if tag == p.TAG_REQUEST and self.gone:
            self.status[-1].fill_(p.STATUS_GONE)
        return _Done()

    def recv(self, tensors: list, peer: int, tag: int) -> _Done:
        self.ops.append(("recv", tag))
        if tag == p.TAG_STATUS:
            self.status.append(tensors[0])
            if self.backend == "nccl":
                tensors[0].fill_(p.STATUS_GONE if self.gone else p.STATUS_OK)
        return _Done()


_REAL_PAIR = consumer._Pair  # (a test may stand a maker of fakes in for it)


def _FakePair(backend: str = "gloo") -> consumer._Pair:  # noqa: N802 - stands for a class
    """A consumer's pair on a recording group (no producer, no rendezvous)."""
    pair = _REAL_PAIR.__new__(_REAL_PAIR)
    pair.pair_id = "0" * 32
    pair.pg = _RecordingGroup(backend)  # type: ignore[attr-defined]  # every group's calls
    pair.datas = pair.asks = [pair.pg]  # type: ignore[attr-defined]
    pair.transfers = 0
    pair.fresh = False
    pair.lock = threading.Lock()
    pair.request = torch.zeros(p.REQUEST_BYTES, dtype=torch.uint8)
    pair.request_host = pair.request.numpy()
    pair.ctl = "cpu"
    pair.request_sent = pair.request
    pair.status = [torch.empty(1, dtype=torch.int64)]
    pair.status_host = [pair.status[0].numpy()]
    pair.gone_watch = [None]
    pair.push = None
    return pair


METAS = [([4], "float32"), ([2, 3], "int64")]


def _fetch(pair: consumer._Pair, backend: str) -> list:
    consumer._pairs[("addr", backend)] = pair
    try:
        return consumer.fetch("addr", backend, "k" * 32, METAS, "cpu", "producer")
    finally:
        consumer._pairs.pop(("addr", backend), None)


@pytest.mark.parametrize("backend", ["gloo", "nccl"])
def test_receives_and_request_are_posted_in_the_backends_order(backend):
    pair = _FakePair(backend)
    out = _fetch(pair, backend)
    assert [tuple(t.shape) for t in out] == [(4,), (2, 3)]
    assert [t.dtype for t in out] == [torch.float32, torch.int64]
    status = [("recv", p.TAG_STATUS)]
    tensors = [("recv", p.TAG_FIRST_TENSOR), ("recv", p.TAG_FIRST_TENSOR + 1)]
    request = [("send", p.TAG_REQUEST)]
    assert pair.pg.ops == (request + status + tensors if backend == "nccl"
                           else status + tensors + request)
    # the sizes in the request are what the receives were posted for
    assert p.decode_request(pair.request_host.tobytes()) == ("k" * 32, 2, [16, 48])
    # the next transfer: with gloo the status receive is still posted from the first
    pair.pg.ops.clear()
    _fetch(pair, backend)
    assert pair.pg.ops == (request + status + tensors if backend == "nccl"
                           else tensors + request)


@pytest.mark.parametrize("backend", ["gloo", "nccl"])
def test_gone_fails_the_transfer_and_the_pair_goes_on(backend):
    """A "gone" answer fails that transfer only: with gloo the standing status receive is
    posted again, and the transfer after it succeeds without a status."""
    pair = _FakePair(backend)
    _fetch(pair, backend)
    pair.pg.gone = True
    with pytest.raises(consumer.TensorTransportError, match="freed"):
        _fetch(pair, backend)
    pair.pg.gone = False
    pair.pg.ops.clear()
    _fetch(pair, backend)
    if backend == "gloo":
        assert pair.pg.ops[0] != ("recv", p.TAG_STATUS)  # reposted when the gone came in
        assert len(pair.pg.status) == 2 and int(pair.status_host[0][0]) == p.STATUS_OK


def test_a_result_without_tensors_needs_no_transfer():
    pair = _FakePair("gloo")
    consumer._pairs[("addr", "gloo")] = pair
    try:
        assert consumer.fetch("addr", "gloo", "k" * 32, [], "cpu", "producer") == []
    finally:
        consumer._pairs.pop(("addr", "gloo"), None)
    assert pair.pg.ops == []


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
    def wait(self, timeout: object = None) -> bool:
        raise RuntimeError("connection closed by peer")


@pytest.mark.parametrize("backend", ["gloo", "nccl"])
@pytest.mark.parametrize("kept_it", [True, False])
def test_the_producer_posts_the_next_request_in_the_backends_order(backend, kept_it,
                                                                    monkeypatch):
    """The next request's receive after the sends (gloo: its notice reaches the consumer
    while it waits for data, not while it may hold its request pair's lock; NCCL: one
    stream, in order); gloo sends a status only when gone, NCCL always."""
    kept = p.KeptTensors()
    tensor = torch.arange(4, dtype=torch.float32)
    if kept_it:
        kept.keep("k" * 32, [tensor])
    raw = bytearray(p.REQUEST_BYTES)
    p.encode_request(raw, "k" * 32, [tensor.nbytes])
    group = _OneRequestGroup(bytes(raw))
    asks = [group] if backend == "nccl" else [group, group]
    datas = [group] * len(asks)
    monkeypatch.setattr(p, "pair_groups", lambda pair_id, rank, backend: (datas, asks))
    monkeypatch.setattr(p, "control_device", lambda backend: "cpu")
    kept._serve("0" * 32, backend)  # returns when the second request's wait fails
    status = [("send", p.TAG_STATUS)] if backend == "nccl" or not kept_it else []
    sends = status + [("send", p.TAG_FIRST_TENSOR)]
    ask = [("recv", p.TAG_REQUEST)]
    # gloo: both request groups' receives are posted up front; the first is posted again
    # only when a request came in on the second (here none does)
    expected = ask + sends + ask if backend == "nccl" else ask + ask + sends
    assert group.ops == expected
    assert kept.sent_bytes == (tensor.nbytes if kept_it else 0)


IDLE_TIMEOUT = datetime.timedelta(seconds=1)


def test_a_pair_idle_past_its_groups_timeout_serves_the_next_fetch(monkeypatch):
    """A pair that stays idle longer than its group's timeout still serves the next transfer.

    The producer's thread waits in a receive for the consumer's next request. gloo closes the
    pair when a receive's wait times out, so a wait bounded by the group's timeout (300 s in
    the runtime) broke every pair idle for that long, and the consumer's next fetch failed with
    "the producer died or stopped answering" (e.g. weights synced every few minutes). Real gloo
    groups, in one process, with a 1 s timeout."""
    dist = pytest.importorskip("torch.distributed")
    store = dist.HashStore()

    def pair_groups(pair_id: str, rank: int, backend: str) -> tuple[list, list]:
        groups = [dist.ProcessGroupGloo(dist.PrefixStore(pair_id + part, store), rank, 2,
                                        IDLE_TIMEOUT) for part in p.GLOO_PARTS]
        return groups[:2], groups[2:]

    monkeypatch.setattr(p, "pair_groups", pair_groups)
    kept = p.KeptTensors()
    key = "k" * 32
    kept.keep(key, [torch.arange(6, dtype=torch.float32)])
    serving = threading.Thread(target=kept._serve, args=("0" * 32, "gloo"), daemon=True)
    serving.start()

    pair = _FakePair("gloo")  # the consumer's side, on real groups
    pair.datas, pair.asks = pair_groups(pair.pair_id, 1, "gloo")
    pair.status = [torch.empty(1, dtype=torch.int64) for _ in range(2)]
    pair.status_host = [s.numpy() for s in pair.status]
    pair.gone_watch = [None, None]
    metas = [([6], "float32")]
    consumer._pairs[("addr", "gloo")] = pair
    try:
        first = consumer.fetch("addr", "gloo", key, metas, "cpu", "producer")
        assert first[0].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
        # the pair stays idle well past its group's timeout (the condition under test,
        # not a wait for something to happen)
        time.sleep(3 * IDLE_TIMEOUT.total_seconds())
        assert serving.is_alive(), "the producer's thread gave the idle pair up"
        again = consumer.fetch("addr", "gloo", key, metas, "cpu", "producer")
        assert again[0].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    finally:
        consumer._pairs.pop(("addr", "gloo"), None)
        del pair  # closing the consumer's groups ends the producer's thread
    serving.join(timeout=60)
    assert not serving.is_alive(), "the producer's thread outlived its consumer"
    assert kept.sent_bytes == 2 * 24


class _Log:
    def __init__(self) -> None:
        self.ops: list[tuple[str, str, int]] = []


class _AskGroup:
    """One request group of a producer, sharing a log: its first `serve` receives of a
    request read `raw`; a later one ends the pair (as a consumer that went away)."""

    def __init__(self, name: str, log: _Log, raw: bytes, serve: int) -> None:
        self.name, self.log, self.raw, self.serve = name, log, raw, serve

    def send(self, tensors: list, peer: int, tag: int) -> _Done:
        self.log.ops.append((self.name, "send", tag))
        return _Done()

    def recv(self, tensors: list, peer: int, tag: int) -> Any:
        self.log.ops.append((self.name, "recv", tag))
        if self.serve > 0:
            self.serve -= 1
            tensors[0].numpy()[:] = memoryview(self.raw)
            return _Done()
        return _Gone()


def test_gloo_requests_take_turns_and_a_group_is_reposted_after_the_next_request(
        monkeypatch):
    """Requests alternate between two groups; one's next receive is posted once a request
    came in on the other (its consumer's thread is long out of its call on this one)."""
    kept = p.KeptTensors()
    tensor = torch.arange(4, dtype=torch.float32)
    kept.keep("k" * 32, [tensor])
    raw = bytearray(p.REQUEST_BYTES)
    p.encode_request(raw, "k" * 32, [tensor.nbytes])
    log = _Log()
    datas = [_AskGroup("d0", log, b"", 0), _AskGroup("d1", log, b"", 0)]
    asks = [_AskGroup("a0", log, bytes(raw), 2), _AskGroup("a1", log, bytes(raw), 1)]
    monkeypatch.setattr(p, "pair_groups", lambda pair_id, rank, backend: (datas, asks))
    monkeypatch.setattr(p, "control_device", lambda backend: "cpu")
    kept._serve("0" * 32, "gloo")  # a0, a1, a0 serve; a1's second receive ends it
    req, tag = p.TAG_REQUEST, p.TAG_FIRST_TENSOR
    assert log.ops == [("a0", "recv", req), ("a1", "recv", req),  # both up front
                       ("d0", "send", tag),  # request 1 (lane 0) answered on lane 0
                       ("a0", "recv", req), ("d1", "send", tag),  # request 2 came on lane 1
                       ("a1", "recv", req), ("d0", "send", tag)]  # request 3 on lane 0
    assert kept.sent_bytes == 3 * tensor.nbytes


def test_the_consumer_takes_the_lanes_in_turn():
    pair = _FakePair("gloo")
    d0, d1, a0, a1 = (_RecordingGroup("gloo") for _ in range(4))
    pair.datas, pair.asks = [d0, d1], [a0, a1]  # type: ignore[attr-defined]
    pair.status = [torch.empty(1, dtype=torch.int64) for _ in range(2)]
    pair.status_host = [s.numpy() for s in pair.status]
    pair.gone_watch = [None, None]
    for _ in range(3):
        _fetch(pair, "gloo")
    tensors = [("recv", p.TAG_FIRST_TENSOR), ("recv", p.TAG_FIRST_TENSOR + 1)]
    assert d0.ops == [("recv", p.TAG_STATUS)] + tensors * 2  # transfers 1 and 3
    assert d1.ops == [("recv", p.TAG_STATUS)] + tensors
    assert a0.ops == [("send", p.TAG_REQUEST)] * 2 and a1.ops == [("send", p.TAG_REQUEST)]


def test_a_process_keeps_a_bounded_number_of_pairs(monkeypatch):
    """Each pair holds a gloo device (sockets, threads) until it is dropped, and only a failed
    fetch dropped one: a consumer that fetched from many producers over its life (actors
    that were replaced, or died with no fetch after) kept every pair. Past MAX_PAIRS the
    least recently used idle one goes; one in use (its lock held) stays."""
    made: list[consumer._Pair] = []

    def new_pair(address: str, backend: str) -> consumer._Pair:
        made.append(_FakePair(backend))
        return made[-1]

    monkeypatch.setattr(consumer, "_Pair", new_pair)
    monkeypatch.setattr(consumer, "MAX_PAIRS", 3)
    monkeypatch.setattr(consumer, "_pairs", type(consumer._pairs)())
    for i in range(3):
        consumer.fetch(f"a{i}", "gloo", "k" * 32, METAS, "cpu", "producer")
    consumer.fetch("a0", "gloo", "k" * 32, METAS, "cpu", "producer")  # a0 used again
    made[1].lock.acquire()  # a1 is mid-transfer in another thread
    try:
        consumer.fetch("a3", "gloo", "k" * 32, METAS, "cpu", "producer")
    finally:
        made[1].lock.release()
    # a2 (least recently used, idle) went; a1 stayed although older, as it was in use
    assert sorted(a for a, _ in consumer._pairs) == ["a0", "a1", "a3"]
    for i in range(4, 20):
        consumer.fetch(f"a{i}", "gloo", "k" * 32, METAS, "cpu", "producer")
    assert len(consumer._pairs) == 3 and len(made) == 20


class _Work(_Done):
    """A receive's work that logs when the consumer lets it go."""

    def __init__(self, log: list, name: tuple) -> None:
        self.log, self.name = log, name

    def __del__(self) -> None:
        self.log.append(("let go",) + self.name)


class _LettingGoGroup(_RecordingGroup):
    """Records sends and receives; each receive of a tensor is a work that logs, named by
    the transfer it belongs to, when it is let go."""

    def recv(self, tensors: list, peer: int, tag: int) -> _Done:
        super().recv(tensors, peer, tag)
        if tag < p.TAG_FIRST_TENSOR:
            return _Done()
        return _Work(self.ops, (self.ops.count(("send", p.TAG_REQUEST)), tag))


def test_a_transfers_receives_are_let_go_in_the_next_one_once_its_request_is_out(
        monkeypatch):
    """Dropping a receive's work whose buffer gloo's loop thread still holds (it wakes the
    waiter first, then lets go) spins in sched_yield: a small transfer's works are kept and
    let go in the pair's next transfer, after its request went out (the producer answers
    meanwhile), or by empty_cache(); a large one's at its end."""
    pair = _FakePair("gloo")
    pair.pg = _LettingGoGroup("gloo")  # type: ignore[attr-defined]
    pair.datas = pair.asks = [pair.pg]  # type: ignore[attr-defined]
    log = pair.pg.ops
    request = ("send", p.TAG_REQUEST)
    first = [("let go", 0, p.TAG_FIRST_TENSOR), ("let go", 0, p.TAG_FIRST_TENSOR + 1)]
    out = _fetch(pair, "gloo")
    del out
    assert not any(op[0] == "let go" for op in log)  # kept past the transfer's end
    _fetch(pair, "gloo")
    second_request = [i for i, op in enumerate(log) if op == request][1]
    assert sorted(op for op in log if op[0] == "let go") == first
    assert all(log.index(op) > second_request for op in first)  # once the request is out
    consumer._pairs[("addr", "gloo")] = pair
    try:
        from zmesh.tensor_transport import empty_cache

        empty_cache()  # lets an idle pair's last works go
    finally:
        consumer._pairs.pop(("addr", "gloo"), None)
    assert sum(op[0] == "let go" for op in log) == 4 and pair.spent == []
    monkeypatch.setattr(consumer, "KEEP_WORKS_BYTES", 8)  # smaller than these transfers
    log.clear()
    _fetch(pair, "gloo")
    assert sum(op[0] == "let go" for op in log) == 2 and pair.spent == []
