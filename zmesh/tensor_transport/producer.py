"""The producer side: tensors kept where they are, and the threads that send them.

A process that returns tensors from a `tensor_transport` method keeps them here under a
key and accepts pairing requests: a consumer asks (a `tensor_pair` query over the mesh's
authenticated links, to this process's client address), and both sides form a 2-rank
process group whose rendezvous keys live in the mesh's KV (no port is opened for it). Each
pair gets a thread here that stays blocked in a receive on that group: a request (the key)
arrives over gloo/NCCL itself, and the thread sends the tensors into the receives the
consumer posted before asking (with NCCL a status goes ahead of them; with gloo only a
"gone" status does, into a receive the consumer keeps posted: each message is a syscall and
a wake-up on both sides). No store round trip, no other thread hand-off and no handshake per
transfer.
"""

from __future__ import annotations

import datetime
import os
import struct
import threading
from typing import Any

import msgspec

STORE_TIMEOUT_S = 300.0
IDLE_WAIT = datetime.timedelta(days=3650)
"""How long a pair's thread waits for the next request: as long as the pair lives. gloo
closes a pair whose receive's wait times out, so a wait bounded by the group's timeout
broke every pair left idle that long (the consumer's next fetch failed); a consumer that
goes away closes its end, which ends the wait at once (gloo; NCCL waits as before)."""
KEY_BYTES = 32  # a key is a uuid4 hex string
INLINE_SIZES = 16  # sizes of up to this many tensors ride in the request itself
REQUEST_BYTES = KEY_BYTES + 8 * (1 + INLINE_SIZES)  # key, count, sizes in bytes
MAX_TENSORS = 1 << 20
TAG_REQUEST, TAG_STATUS, TAG_SIZES, TAG_FIRST_TENSOR = 0, 1, 2, 3
GLOO_DATAS = ("", "data1/")  # gloo: two lanes of a tensors' group and a requests' (see
GLOO_ASKS = ("ask0/", "ask1/")  # KeptTensors._serve)
GLOO_PARTS = GLOO_DATAS + GLOO_ASKS
STATUS_OK, STATUS_GONE = 1, 0


def pair_prefix(pair_id: str) -> str:
    return f"zmesh/tensor_transport/{pair_id}/"


class KeptTensors:
    """Tensors this process produced and still lends out, by key (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: dict[str, tuple[list[Any], list[int]]] = {}  # key -> tensors, sizes
        self._tags: dict[str, int] = {}  # key -> its push tag (see push.PUSH_TAGS)
        self._next_tag = 0
        self.address = ""
        self.sent_bytes = 0
        self.pushes: Any = None  # push.PushLanes, set when that module is loaded

    def keep(self, key: str, tensors: list[Any]) -> int:
        """Keep `tensors` under `key`; the key's push tag (the next one in turn)."""
        sizes = [t.nbytes for t in tensors]
        with self._lock:
            self._kept[key] = (tensors, sizes)
            tag = self._tags[key] = self._next_tag
            self._next_tag += 1
            return tag

    def tag(self, key: str) -> int | None:
        """The push tag of a kept key, or None."""
        with self._lock:
            return self._tags.get(key)

    def get(self, key: str) -> list[Any] | None:
        lent = self.lend(key)
        return None if lent is None else lent[0]

    def lend(self, key: str) -> tuple[list[Any], list[int]] | None:
        """The tensors kept under `key` and their sizes in bytes, or None."""
        with self._lock:
            return self._kept.get(key)

    def drop(self, key: str) -> None:
        """The last ref anywhere went: free the tensors (device memory too)."""
        with self._lock:
            self._kept.pop(key, None)
            self._tags.pop(key, None)

    def count(self) -> int:
        with self._lock:
            return len(self._kept)

    def listen(self) -> str:
        """This process's client address, where consumers ask to pair (set up once)."""
        with self._lock:
            if not self.address:
                from zmesh.runtime import context

                client = context.current_client()
                client.query_handlers["tensor_pair"] = self._on_pair
                if self.pushes is not None:
                    client.query_handlers["tensor_push"] = self.pushes.on_push
                self.address = client.address
            return self.address

    def _on_pair(self, sender: str, msg: Any) -> Any:
        """A consumer asks to pair (client loop thread): start the pair's thread, say yes."""
        from zmesh.protocol.messages import runtime as m

        try:
            pair_id, backend = msgspec.msgpack.decode(msg.arg, type=tuple[str, str])
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            return m.QueryReply(request_id=msg.request_id, data=b"",
                                error=f"tensor_pair: bad argument ({exc})")
        if backend not in ("gloo", "nccl") or not pair_id.isalnum() or len(pair_id) > 64:
            return m.QueryReply(request_id=msg.request_id, data=b"",
                                error=f"tensor_pair: bad pair {pair_id[:64]!r}/{backend!r}")
        threading.Thread(target=self._serve, args=(pair_id, backend, sender), daemon=True,
                         name=f"tensor-transport-{pair_id[:8]}").start()
        return m.QueryReply(request_id=msg.request_id, data=msgspec.msgpack.encode(True))

    def _serve(self, pair_id: str, backend: str, consumer: str = "") -> None:
        try:
            datas, asks = pair_groups(pair_id, 0, backend)
        except Exception:  # noqa: BLE001 - the consumer never came (its fetch fails alone)
            return
        lanes = self.pushes
        if backend != "gloo" or not consumer or lanes is None:  # NCCL: one CUDA stream per
            self._answer(datas, asks, backend)  # pair, so pulls only
            return
        # a push's tensors go on the first tensors' group, its notice on the first
        # requests' group (see push.PushLanes.open)
        lanes.open(consumer, pair_id, datas[0], asks[0])
        try:
            self._answer(datas, asks, backend)
        finally:
            lanes.close(consumer, pair_id)

    def _answer(self, datas: list[Any], asks: list[Any], backend: str) -> None:
        """Answer the pair's requests until it ends."""
        import torch

        ctl = control_device(backend)  # nccl moves CUDA tensors only, control ones too
        requests = [torch.empty(REQUEST_BYTES, dtype=torch.uint8, device=ctl) for _ in asks]
        # where a request is read: the buffer itself on the host (copied out before its
        # receive is posted again), a host copy for nccl
        readable = [r.numpy() for r in requests] if ctl == "cpu" else None
        answers = {ok: torch.full((1,), ok, dtype=torch.int64, device=ctl)
                   for ok in (STATUS_OK, STATUS_GONE)}
        # gloo's loop thread only *tries* a pair's lock, and spins on epoll_wait while a
        # user thread holds it. A write wakes the peer, which can preempt the writer inside
        # its call, holding that pair's lock while the peer's answer comes in on it.
        # Measured with one group per pair: ~1,000 epoll_wait calls and ~0.7 ms of loop CPU
        # per 1 MB transfer; with one more group for requests, still 100-450 calls on the
        # request pair or on the tensors' pair. So (gloo) a transfer's request and tensors
        # go over two groups, and transfers take two such lanes in turn: each side writes
        # the next message on a pair the other is not writing on. A lane's next request
        # receive is posted once the *next* request came in on the other lane (the
        # consumer's thread is then long out of its call there). NCCL: one group for all;
        # the next request's receive after the sends, as one CUDA stream runs a pair's
        # operations in order (a receive ahead of them would wait for the next request)
        status_always = backend == "nccl"  # gloo: a status only says "gone" (see above)
        asking = [a.recv([r], 1, TAG_REQUEST) for a, r in zip(asks, requests)]
        spent = [False] * len(asks)  # a request group whose receive was read, not reposted
        turn = 0
        while True:
            try:
                pg, ask, request = datas[turn], asks[turn], requests[turn]
                if status_always:
                    asking[turn].wait()  # nccl: a timeout here would make torch poll the work
                else:
                    asking[turn].wait(IDLE_WAIT)
                # decoded (copied out) now: its buffer takes the next request
                key, count, sizes = decode_request(
                    readable[turn] if readable is not None else request.cpu().numpy())
                if not 0 <= count <= MAX_TENSORS:
                    return  # not a consumer of ours: drop the pair
                if count > INLINE_SIZES:  # sent right behind the request
                    asked = torch.empty(count, dtype=torch.int64, device=ctl)
                    ask.recv([asked], 1, TAG_SIZES).wait()
                    sizes = asked.tolist()
                spent[turn] = True
                before = (turn - 1) % len(asks)
                if not status_always and before != turn and spent[before]:
                    asking[before] = asks[before].recv([requests[before]], 1, TAG_REQUEST)
                    spent[before] = False
                lent = self.lend(key)
                tensors = lent[0] if lent is not None and lent[1] == sizes else None
                ok = tensors is not None  # else gone, or not what the consumer expects
                works: list[Any] = []
                if not ok or status_always:
                    # a status goes first: always with NCCL, only "gone" with gloo (there the
                    # consumer keeps a receive of it posted that only this fills; it lands
                    # before the zeros below, so the consumer reads it once those are in)
                    status = answers[STATUS_OK if ok else STATUS_GONE]
                    works.append(pg.send([status], 1, TAG_STATUS))
                if tensors is None:
                    # zeros fill the consumer's posted receives: the pair stays in step
                    tensors = [torch.zeros(n, dtype=torch.uint8, device=ctl) for n in sizes]
                # post every send at once, in the order the consumer waits for them; one
                # wake-up here, when the last is out
                works += [pg.send([t], 1, TAG_FIRST_TENSOR + i) for i, t in enumerate(tensors)]
                for work in reversed(works):
                    work.wait()
                if status_always:
                    asking[turn] = ask.recv([request], 1, TAG_REQUEST)
                    spent[turn] = False
                turn = (turn + 1) % len(asks)
                if ok:
                    self.sent_bytes += sum(sizes)
            except Exception:  # noqa: BLE001 - the consumer went away (or died midway)
                return


def control_device(backend: str) -> str:
    """Where a pair's control tensors (request, status, sizes) live: host memory for gloo,
    this process's current CUDA device for nccl (not run on a GPU yet)."""
    if backend != "nccl":
        return "cpu"
    import torch

    return f"cuda:{torch.cuda.current_device()}"


_REQUESTS = [struct.Struct(f"<{KEY_BYTES}sq{n}q") for n in range(INLINE_SIZES + 1)]
_COUNT = struct.Struct("<q")


def encode_request(into: Any, key: str, sizes: list[int]) -> None:
    """Write the request a consumer sends into `into` (a uint8 array of REQUEST_BYTES): the
    key, how many tensors it posted receives for and their sizes in bytes (when more than
    INLINE_SIZES, the sizes follow in a second message, see `extra_sizes`)."""
    inline = sizes if len(sizes) <= INLINE_SIZES else []
    _REQUESTS[len(inline)].pack_into(into, 0, key.encode().ljust(KEY_BYTES), len(sizes),
                                     *inline)


def extra_sizes(sizes: list[int]) -> Any:
    """The sizes message that follows a request for more than INLINE_SIZES tensors, or None."""
    import torch

    return torch.tensor(sizes, dtype=torch.int64) if len(sizes) > INLINE_SIZES else None


def decode_request(raw: Any) -> tuple[str, int, list[int]]:
    """(key, count, the sizes carried inline) of a request's REQUEST_BYTES bytes (any
    buffer)."""
    (count,) = _COUNT.unpack_from(raw, KEY_BYTES)
    key, _count, *sizes = _REQUESTS[min(max(count, 0), INLINE_SIZES)].unpack_from(raw)
    return key.decode(errors="replace"), count, sizes


def pair_groups(pair_id: str, rank: int, backend: str) -> tuple[list[Any], list[Any]]:
    """The pair's 2-rank process groups, by lane: (the tensors' groups, the requests').
    NCCL: one lane, one group for both. gloo: two lanes, four groups on one gloo device of
    their own (one loop thread) with one worker thread each (send and recv use none).
    Rendezvous through the mesh's KV."""
    import torch.distributed as dist

    from zmesh.collective.store import MeshStore

    prefix = pair_prefix(pair_id)
    timeout = datetime.timedelta(seconds=STORE_TIMEOUT_S)
    if backend == "nccl":
        store = MeshStore(prefix, STORE_TIMEOUT_S)
        pg = dist.ProcessGroupNCCL(store, rank, 2, dist.ProcessGroupNCCL.Options())
        return [pg], [pg]
    options = dist.ProcessGroupGloo._Options()  # type: ignore[attr-defined]
    options._devices = [dist.ProcessGroupGloo.create_default_device()]
    options._threads = 1
    options._timeout = timeout
    groups = [dist.ProcessGroupGloo(MeshStore(prefix + part, STORE_TIMEOUT_S), rank, 2, options)
              for part in GLOO_PARTS]
    return groups[:len(GLOO_DATAS)], groups[len(GLOO_DATAS):]


KEPT = KeptTensors()
PROCESS_TOKEN = f"{os.getpid()}-{os.urandom(6).hex()}"
