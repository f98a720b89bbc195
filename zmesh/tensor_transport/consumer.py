"""The consumer side: fetch a producer's tensors straight from it over torch.distributed.

One 2-rank process group per producer, formed on first use (a `tensor_pair` query to the
producer, then a rendezvous in the mesh's KV) and reused after; requests on one pair are
serialized (threads of one process share it). A transfer is: every receive posted and the
key (with the tensors' sizes) sent over the group; the tensors back (behind a status with
NCCL, or when they are gone), in one go.
"""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict
from typing import Any

import msgspec

from zmesh.tensor_transport import producer as p
from zmesh.tensor_transport import push as pu
from zmesh.tensor_transport.pool import POOL
from zmesh.tensor_transport.push_in import Pushed, PushIn
from zmesh.tensor_transport.types import TensorTransportError

CONNECT_TIMEOUT_S = 10.0
MAX_PAIRS = 32
"""Pairs a process keeps (each holds its gloo device: sockets and threads, on both sides):
past this, the least recently used idle one is dropped (its producer's thread then ends),
so producers that were replaced, or died with no fetch after, do not pile up."""


class _Pair:
    def __init__(self, address: str, backend: str) -> None:
        from zmesh.protocol.messages import runtime as m
        from zmesh.runtime import context

        self.pair_id = uuid.uuid4().hex
        arg = msgspec.msgpack.encode([self.pair_id, backend])
        # a dead producer does not answer: give up on it after CONNECT_TIMEOUT_S
        reply = context.current_client().request(
            lambda rid: m.Query(request_id=rid, what="tensor_pair", arg=arg),
            timeout=CONNECT_TIMEOUT_S, to=address)
        if reply.error:
            raise TensorTransportError(reply.error)
        # groups for the tensors (and statuses) and for the requests, taken in turn:
        # transfer t uses datas[t % len(datas)] and asks[t % len(asks)] (gloo: two lanes
        # of one each, see producer.KeptTensors._serve; NCCL: one group for both)
        self.datas, self.asks = p.pair_groups(self.pair_id, 1, backend)
        self.transfers = 0  # transfers begun on this pair
        self.fresh = True  # the rendezvous keys are deleted after the first exchange
        self.lock = threading.Lock()  # one transfer at a time: it guards the buffers below
        import torch

        # the request is written in place in host memory (and copied to the GPU for nccl)
        self.request = torch.zeros(p.REQUEST_BYTES, dtype=torch.uint8)
        self.request_host = self.request.numpy()
        self.ctl = p.control_device(backend)  # nccl: control tensors on the GPU too
        self.request_sent = self.request.to(self.ctl)
        self.status = [torch.empty(1, dtype=torch.int64, device=self.ctl)
                       for _ in self.datas]  # one per lane
        self.status_host = [s.numpy() for s in self.status] if self.ctl == "cpu" else []
        self.gone_watch: list[Any] = [None] * len(self.datas)  # gloo, per lane
        self.spent: list[Any] = []  # the last transfer's works, dropped in the next one
        self.push = PushIn(self.datas[0], self.asks[0]) if backend == "gloo" else None

    def drop_spent(self) -> None:
        """Let the last transfer's works go (under `lock`), in the next transfer once its
        request is out (the producer is answering meanwhile). Not at the end of their own:
        gloo's loop thread wakes the waiter from inside its read and only then lets go of
        the receive's buffer, and dropping a work whose buffer it still holds spins in
        sched_yield until it does (on 2 busy cores the waiter, just woken, has usually
        preempted it): 9-13% of the consumer thread's time per 1 MB transfer."""
        self.spent = []

    def watch_for_gone(self, lane: int) -> None:
        """gloo: (re)post the lane's receive that only a "gone" answer fills. It stays
        posted across transfers, so a transfer that goes well costs no status message; a
        "gone" lands before the zeros that fill the transfer's receives, so it is in the
        lane's status once they are."""
        self.status_host[lane][0] = p.STATUS_OK
        self.gone_watch[lane] = self.datas[lane].recv([self.status[lane]], 0, p.TAG_STATUS)


def receive_early(args: Any) -> None:
    """A call came in (the worker's loop thread): post the receives of each push its caller
    ordered for it (flagged in its descriptor), on the pair with that producer if one is
    made and has moved tensors (so the producer's side of it is up); else the read pulls."""
    for mark in pu.flagged_markers(args):
        pair = _pairs.get((mark.address, "gloo"))
        if pair is not None and pair.push is not None and not pair.fresh:
            try:
                pair.push.early(mark.key, mark.tag, mark.sizes)
            except Exception:  # noqa: BLE001 - the pair broke: the read finds out, pulls
                pass


pushed_reads = 0  # reads served by a push, in this process (for tests and tools)
early_reads = 0  # ... of them, posted when their call came in
pairs_dropped = 0  # pairs dropped as out of step (a push posted that never came)
requests_sent = 0  # pull requests sent by this process (for tests and tools)


KEEP_WORKS_BYTES = 8 << 20
"""A transfer up to this size keeps its works (and with them its tensors' memory, after the
caller let them go) until the pair's next transfer or `empty_cache()`, so that dropping them
never waits on gloo's loop thread (see _Pair.drop_spent); past it that wait is noise beside
the data (8 MB take ~3 ms here)."""

_pairs: OrderedDict[tuple[str, str], _Pair] = OrderedDict()  # least recently used first
_pairs_lock = threading.Lock()
_making: dict[tuple[str, str], threading.Event] = {}  # pairs being made, set once settled


def _pair_for(address: str, backend: str) -> _Pair:
    """The pair to the producer at `address` (made on first use; most recently used now).

    A pair is made outside `_pairs_lock` (a query, up to CONNECT_TIMEOUT_S for a dead
    producer, then a rendezvous): under it, one thread pairing with a dead producer stalled
    every other thread's fetch, from live producers too. Threads that want the same new pair
    wait for the one making it (and try again themselves if that failed)."""
    key = (address, backend)
    while True:
        with _pairs_lock:
            pair = _pairs.get(key)
            if pair is not None:
                _pairs.move_to_end(key)
                return pair
            making = _making.get(key)
            if making is None:
                making = _making[key] = threading.Event()
                break
        making.wait()
    try:
        pair = _Pair(address, backend)
    except BaseException:
        with _pairs_lock:
            del _making[key]
        making.set()
        raise
    dropped = None
    with _pairs_lock:
        del _making[key]
        if len(_pairs) >= MAX_PAIRS:  # drop the least recently used one not in a transfer
            idle = next((k for k, v in _pairs.items() if not v.lock.locked()), None)
            if idle is not None:
                dropped = (idle[0], _pairs.pop(idle))
        _pairs[key] = pair
    making.set()
    if dropped is not None and dropped[1].push is not None:
        _end_pushes(dropped[0], dropped[1].pair_id)
    return pair


def _drop_pair(address: str, backend: str, pair: _Pair) -> None:
    """Forget a pair that is out of step (a push posted on it will never come): the next
    transfer makes a new one; this one's push thread is ended and both sides close."""
    global pairs_dropped
    pairs_dropped += 1
    with _pairs_lock:
        if _pairs.get((address, backend)) is pair:
            del _pairs[(address, backend)]
    if pair.push is not None:
        _end_pushes(address, pair.pair_id)


def _end_pushes(address: str, pair_id: str) -> None:
    """A dropped pair's thread waits for the next push header (and so keeps the pair open):
    ask its producer for a last header that ends it (then the pair closes, on both sides).
    Named by its id: a newer pair with the same producer is not ended."""
    from zmesh.protocol.messages import runtime as m
    from zmesh.runtime import context

    client = context.current_client()
    arg = msgspec.msgpack.encode(["", client.address, pair_id])
    try:
        client.loop.send_threadsafe(address, m.Query(request_id=0, what="tensor_push", arg=arg))
    except Exception:  # noqa: BLE001 - a producer gone already closed the pair
        pass


def fetch(address: str, backend: str, key: str, metas: list[tuple[list[int], str]],
          device: str, producer: str, pushed: bool = False) -> list[Any]:
    """The tensors kept under `key` by the producer at `address`, received into new
    buffers (on `device`; large host ones from the warm pool); TensorTransportError when the
    producer died or freed them.

    One hop before the data: with gloo every receive is posted before the request goes out,
    so the producer's sends land straight in place; with NCCL the request goes first (a
    pair's operations run in order on one CUDA stream), then the status's and the tensors'.
    Even for a freed key every receive is matched (with zeros), so the pair stays usable.
    """
    import torch

    if not metas:
        return []  # nothing to move: the result is all in its descriptor
    try:
        paired = (address, backend) in _pairs  # (a push needs a pair made before)
        pair = _pair_for(address, backend)
        dtypes = [getattr(torch, dtype) for _, dtype in metas]
        sizes = [_numel(shape) * dt.itemsize for (shape, _), dt in zip(metas, dtypes)]
        if pair.push is not None:
            ordered = pushed and paired
            if ordered:
                pair.push.wait_for(key)  # the caller ordered a push: posted, or refused
            came = pair.push.take(key, sizes, metas, dtypes)
            if came is not None:  # pushed: no request
                with pair.lock:
                    got = _receive_pushed(pair, came)
                if got is not None:
                    return got
            if pair.push.broken:  # a push posted here that will never come: a new pair
                _drop_pair(address, backend, pair)
                pair = _pair_for(address, backend)
        more = p.extra_sizes(sizes)
        if more is not None:
            more = more.to(pair.ctl)
        with pair.lock:
            transfer = pair.transfers
            pair.transfers += 1
            lane = transfer % len(pair.datas)  # the tensors' group, its status's slot
            pg, ask, status = pair.datas[lane], pair.asks[transfer % len(pair.asks)], \
                pair.status[lane]
            p.encode_request(pair.request_host, key, sizes)
            request = pair.request_sent
            if request is not pair.request:
                request.copy_(pair.request)
            if backend == "nccl":
                # one CUDA stream runs a pair's sends and receives in order: a receive
                # queued ahead of the request would wait forever for the answer to it
                sent = _ask(ask, request, more)
                done = pg.recv([status], 0, p.TAG_STATUS)
                out, works = _post(pg, metas, dtypes, device)
                works.insert(0, done)
            else:
                # gloo: every receive is posted before the request goes out, so the
                # producer's sends find them and land straight in place; no status comes
                # unless the tensors are gone (see _Pair.watch_for_gone)
                if pair.gone_watch[lane] is None:
                    pair.watch_for_gone(lane)
                out, works = _post(pg, metas, dtypes, device)
                sent = _ask(ask, request, more)
            pair.drop_spent()  # while the producer answers
            # the producer sends (the status, then) the tensors in order, over one
            # connection: waiting for the last receive first wakes this thread once
            for work in reversed(works):
                work.wait()
            for work in sent:
                work.wait()
            if sum(sizes) <= KEEP_WORKS_BYTES:
                pair.spent = works  # see _Pair.drop_spent (they hold the received tensors)
            if pair.fresh:
                pair.fresh = False
                _forget(pair.pair_id)
            if backend != "nccl":
                gone = pair.status_host[lane][0] != p.STATUS_OK
                if gone:  # it came in: a new standing receive for the next "gone"
                    pair.gone_watch[lane].wait()
                    pair.watch_for_gone(lane)
            else:
                gone = int(status.item()) != p.STATUS_OK
            if gone:
                # the producer filled our receives with zeros, so the pair stays in step (a
                # path that should never run: the ref being read keeps the tensors alive)
                raise TensorTransportError(f"tensors of {producer} cannot be fetched: gone: "
                                           f"the tensors were freed (no ref was left)")
        return out
    except TensorTransportError:
        raise
    except Exception as exc:  # noqa: BLE001 - torch raises RuntimeError on a lost peer
        with _pairs_lock:
            _pairs.pop((address, backend), None)
        raise TensorTransportError(
            f"tensors of {producer} cannot be fetched: the producer died or stopped "
            f"answering ({type(exc).__name__}: {exc})") from exc


def _receive_pushed(pair: _Pair, pushed: Pushed) -> list[Any] | None:
    """Wait for a noticed push's receives (the pair's lock held); None when the pair broke
    (the producer went away: the read then finds out on a new pair)."""
    global pushed_reads, early_reads
    assert pair.push is not None
    nbytes = sum(pushed.sizes)
    pair.drop_spent()
    try:
        for work in reversed(pushed.works):  # (the last one in first: one wake-up)
            work.wait()
    except Exception:  # noqa: BLE001 - the producer went away
        pair.push.broken = True
        return None
    if nbytes <= KEEP_WORKS_BYTES:
        pair.spent = pushed.works  # see _Pair.drop_spent
    pushed_reads += 1
    early_reads += pushed.claimed
    return pushed.out


def _ask(ask: Any, request: Any, more: Any) -> list[Any]:
    """Send the request (and the sizes behind it, when many) over the group `ask`."""
    global requests_sent
    requests_sent += 1
    sent = [ask.send([request], 0, p.TAG_REQUEST)]
    if more is not None:
        sent.append(ask.send([more], 0, p.TAG_SIZES))
    return sent


def _post(pg: Any, metas: list[tuple[list[int], str]], dtypes: list[Any],
          device: str) -> tuple[list[Any], list[Any]]:
    """New buffers for the tensors, and the receive of each over the group `pg`."""
    out = [_empty(shape, dt, device) for (shape, _), dt in zip(metas, dtypes)]
    works = [pg.recv([t], 0, p.TAG_FIRST_TENSOR + i) for i, t in enumerate(out)]
    return out, works


def _numel(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _empty(shape: list[int], dtype: Any, device: str) -> Any:
    import torch

    if device == "cpu":
        return POOL.empty(shape, dtype)
    return torch.empty(shape, dtype=dtype, device=device)


def drop_idle_spent() -> None:
    """Let every idle pair's last works go (`empty_cache()`: their tensors' blocks, once
    the caller let those go, come back to the pool and are released with it)."""
    with _pairs_lock:
        pairs = list(_pairs.values())
    for pair in pairs:
        if pair.lock.acquire(blocking=False):
            try:
                pair.drop_spent()
                if pair.push is not None:
                    pair.push.clear()
            finally:
                pair.lock.release()


def _forget(pair_id: str) -> None:
    """Both sides have met: the rendezvous keys are no longer needed."""
    from zmesh.collective.store import MeshStore

    try:
        MeshStore(p.pair_prefix(pair_id), 1.0).clear()
    except Exception:  # noqa: BLE001 - best effort; the keys are small
        pass
