"""Push at dispatch (gloo): a caller that sends an actor call whose top-level arguments hold a
tensor-transport ref tells the ref's producer, at the same moment, to start the tensors'
sends to the callee, so the consumer's read needs no request round trip.

The three sides:

- the **caller** (`scan` / `order`): a call's top-level ref values are resolved in the caller
  before the call goes out; a descriptor's value carries a marker (`MAGIC`, the key, the
  producer's address). For each one found, a `tensor_push` query (no reply) goes to the
  producer, naming the key and the callee's address, just before the call itself;
- the **producer** (`PushLanes`): if it has a gloo pair with that consumer, still keeps the
  key, and fewer than MAX_ARMED pushes on that pair are unreceived, it posts, on the pair's
  first tensors' group, a header (key and sizes, on TAG_PUSH_HEADER) and a send of each tensor
  (TAG_PUSH_FIRST + i). gloo holds a send until the peer posts its receive, then its loop
  thread writes the data: no Python runs in the producer when the consumer reads;
- the **consumer** (consumer.PushIn): keeps a receive of the next header posted, and a
  thread per pair blocked in it takes each header as it comes in, posting its tensors'
  receives at once (in header order), so the data moves while the call is still on its way
  to the method; the transfer is kept (bounded) for the read of its key. A read whose key
  was pushed waits for those receives and sends no request; else it pulls as before.

Correctness never rests on the push: a push that cannot be made is not made (no pair yet,
NCCL, too many tensors, key gone, too many unreceived), and the consumer then pulls. Pushes
use their own tags, received strictly in header order, so they never match a pull's
receives (which keep their own tags, lanes and order). A push nobody reads is received
all the same and kept by the consumer until MAX_KEPT newer ones wait, or PUSH_KEEP_S passed
when the next one comes in, or `empty_cache()`; the producer lets each go once received.
"""

from __future__ import annotations

import os
import struct
import threading
import time
from collections import deque
from typing import Any

import msgspec

from zmesh.tensor_transport import producer as p

MAGIC = b"\xffzmTTp1"
"""Starts the push marker inside a descriptor's pickled value: MAGIC, the key (KEY_BYTES),
the producer's address length (2 bytes, little-endian) and the address."""
ENABLED = os.environ.get("ZMESH_TENSOR_PUSH", "0") == "1"
"""Whether callers order pushes (ZMESH_TENSOR_PUSH=1 in the caller's environment). Off by
default: measured (benchmarks/results/stop21/tensor_push.md), the push loses the race with
the call it goes with in most reads on a loaded host, and the consumer, not knowing a push
was ordered, pulls and then receives the push too (twice the bytes and CPU). The producer
and consumer sides are always on (they cost an idle thread per pair)."""
SCAN_LIMIT = 4096  # values larger than this are not searched for a marker (descriptors: ~500 B)
TAG_PUSH_HEADER = 1 << 24  # above every pull tag (TAG_FIRST_TENSOR + MAX_TENSORS)
TAG_PUSH_FIRST = TAG_PUSH_HEADER + 1
HEADER_BYTES = p.REQUEST_BYTES + 8
"""A push header: the request's layout (key, count, sizes), then a byte set to 1 last: the
consumer sees a header has come in by that byte (its receive's work says nothing until it
is waited on, and a wait with a timeout would close the pair)."""
MAX_ARMED = 1
"""Unreceived pushes per pair, in the producer: past it a push is not made (the consumer
pulls). One, so that a push the consumer did not read in time (it pulled: the header came
in after its read began) is taken at its next read while that read's own push is refused:
with more, each read's push would queue behind the unread ones and come in too late too."""
MAX_KEPT = 4  # pushed transfers a consumer keeps for a later read, per pair
PUSH_WAIT_S = 2.0
"""How long a read of a pushed ref waits for the push (or the producer's refusal) when
neither comes: only a push asked for while the pair was being made, or lost with a producer
(or one that is merely late on a loaded machine: the read then pulls). The consumer's
environment may set another (ZMESH_TENSOR_PUSH_WAIT_S, read at each wait)."""
PUSH_WAIT_ENV = "ZMESH_TENSOR_PUSH_WAIT_S"


def push_wait_s() -> float:
    """PUSH_WAIT_S, or the consumer's ZMESH_TENSOR_PUSH_WAIT_S (a positive number)."""
    raw = os.environ.get(PUSH_WAIT_ENV)
    if raw is None:
        return PUSH_WAIT_S
    try:
        value = float(raw)
    except ValueError:
        return PUSH_WAIT_S
    return value if value > 0 else PUSH_WAIT_S
PUSH_KEEP_S = 30.0  # ... and for at most this long (checked at its next read on the pair)
_MARK = struct.Struct("<H")
_U32 = struct.Struct("<I")
# What a descriptor's inline value is (values.pack's compact form, pickle protocol 5): the
# pickle starts by calling value._materialize (PROTO 5, maybe a FRAME, then this global) on
# the state dict, whose last item is the marker (keep() puts it last), a bytes object
# (SHORT_BINBYTES 'C' or BINBYTES 'B'), after which only the pickle's end follows: MEMOIZE,
# SETITEMS, TUPLE1, MEMOIZE, REDUCE, MEMOIZE, STOP. (The module and function names are
# checked by tests/unit/tensor_transport/test_push_marker.py, which packs a real one.)
_MODULE, _FUNCTION = b"zmesh.tensor_transport.value", b"_materialize"
_CALL = (b"\x8c" + bytes([len(_MODULE)]) + _MODULE + b"\x94\x8c" + bytes([len(_FUNCTION)])
         + _FUNCTION + b"\x94\x93")
_TAIL = b"\x94u\x85\x94R\x94."
_COMPACT, _PROTO5, _FRAME = 1, b"\x80\x05", 0x95
_LAST = struct.Struct(f"<{p.KEY_BYTES}sq")  # a header with no tensors: key, what
ENDED, REFUSED = -1, -2  # (in a header's count)


def marker(key: str, address: str) -> bytes:
    """MAGIC, a flag byte (0; a caller that ordered a push sets it to 1 in the copy it
    sends), the key, the address's length and the address."""
    raw = address.encode()
    return (MAGIC + b"\x00" + key.encode().ljust(p.KEY_BYTES)[:p.KEY_BYTES]
            + _MARK.pack(len(raw)) + raw)


def was_pushed(mark: bytes) -> bool:
    """Whether the caller that sent this descriptor ordered its push to the reader."""
    return len(mark) > len(MAGIC) and mark[len(MAGIC)] == 1


Push = tuple[str, str, int, int]  # key, producer address, argument's index, flag's offset


def scan(values: list[Any]) -> list[Push]:
    """(key, producer address, index, flag offset) of each tensor-transport descriptor among
    a call's resolved top-level argument values (inline ones, up to SCAN_LIMIT bytes)."""
    found: list[Push] = []
    if not ENABLED:
        return found
    for index, value in enumerate(values):
        data = getattr(value, "data", b"")
        if not data or len(data) > SCAN_LIMIT or getattr(value, "is_error", False):
            continue
        i = _marker_at(bytes(data))
        if i < 0:
            continue
        flag = i + len(MAGIC)
        at = flag + 1
        key = bytes(data[at:at + p.KEY_BYTES])
        at += p.KEY_BYTES
        (n,) = _MARK.unpack_from(data, at)
        address = bytes(data[at + 2:at + 2 + n])
        if at + 2 + n != len(data) - len(_TAIL) or not key.isalnum() or data[flag] > 1:
            continue  # the address must end the marker exactly
        try:
            found.append((key.decode(), address.decode(), index, flag))
        except UnicodeDecodeError:
            continue
    return found


def _marker_at(data: bytes) -> int:
    """Where the marker starts in `data` when `data` is a descriptor's value and the marker
    its own (the state's last item, see _CALL), else -1: MAGIC in any other bytes (a user's
    value, or the user's part of a descriptor's result) is never taken for one."""
    if data[0] != _COMPACT or not data.endswith(_TAIL):
        return -1
    at = data.find(b"\x00", 1) + 1
    if at <= 0 or not data.startswith(_PROTO5, at):
        return -1
    at += len(_PROTO5)
    if at < len(data) and data[at] == _FRAME:
        at += 9  # the opcode and a u64 length
    if not data.startswith(_CALL, at):
        return -1
    end = len(data) - len(_TAIL)
    i = data.rfind(MAGIC, at, end)
    size = end - i
    if i < 0 or size < len(MAGIC) + 1 + p.KEY_BYTES + _MARK.size:
        return -1
    if size < 256 and data[i - 2] == ord("C") and data[i - 1] == size:
        return i
    if data[i - 5] == ord("B") and _U32.unpack_from(data, i - 4)[0] == size:
        return i
    return -1


pushes_ordered = 0  # this process, as a caller (for tests and tools)


def order(client: Any, consumer: str, pushes: list[Push], on_loop: bool) -> list[Push]:
    """Ask each producer to push its key to the process at `consumer` (no reply is sent;
    from the client's loop thread, or any thread with `on_loop` False); the pushes ordered."""
    global pushes_ordered
    from zmesh.protocol.messages import runtime as m

    ordered = []
    for push in pushes:
        key, address = push[0], push[1]
        if address == consumer or not address.startswith(("ipc://", "tcp://")):
            continue  # the consumer is the producer: it reads its own tensors
        arg = msgspec.msgpack.encode([key, consumer])
        try:
            msg = m.Query(request_id=0, what="tensor_push", arg=arg)
            if on_loop:
                client.loop.send(address, msg)
            else:
                client.loop.send_threadsafe(address, msg)
            pushes_ordered += 1
            ordered.append(push)
        except Exception:  # noqa: BLE001 - best effort: the consumer pulls instead
            pass
    return ordered


def flagged(args: Any, ordered: list[Push]) -> Any:
    """The call's arguments with each ordered push's flag set in its descriptor's value (the
    same length: the pickle stays valid), so the reader waits for the push, not pulls."""
    from zmesh.protocol.messages import runtime as m

    if not ordered:
        return args
    refs = list(args.refs)
    for _key, _address, index, flag in ordered:
        value = refs[index]
        data = bytearray(value.data)
        data[flag] = 1
        refs[index] = m.Value(data=bytes(data), loc=value.loc, is_error=value.is_error)
    return m.Args(data=args.data, refs=refs)


class _Lane:
    """The producer's push state for one consumer pair (gloo)."""

    def __init__(self, pair_id: str, group: Any) -> None:
        self.pair_id = pair_id
        self.group = group
        self.armed: deque[list[Any]] = deque()  # each unreceived push's works, oldest first
        self.notices = 0  # of them, headers with no tensors (not counted against MAX_ARMED)
        self.ended = False  # the header that ends the consumer's thread was posted
        self.cond = threading.Condition()
        self.closed = False
        self.reaper: threading.Thread | None = None


class PushLanes:
    """The producer's pairs that can take pushes, by consumer address (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lanes: dict[str, _Lane] = {}
        self.pushed = 0  # pushes posted (for tests and tools)
        self.declined = 0

    def open(self, consumer: str, pair_id: str, group: Any) -> None:
        """A gloo pair with the process at `consumer` is up (its serving thread)."""
        lane = _Lane(pair_id, group)
        with self._lock:
            old = self._lanes.get(consumer)
            self._lanes[consumer] = lane
        if old is not None:
            _close(old)

    def close(self, consumer: str, pair_id: str) -> None:
        """The pair ended (its serving thread): forget it if it is still the current one."""
        with self._lock:
            lane = self._lanes.get(consumer)
            if lane is None or lane.pair_id != pair_id:
                return
            del self._lanes[consumer]
        _close(lane)

    def count(self) -> int:
        """Pairs open to pushes (for tests and tools)."""
        with self._lock:
            return len(self._lanes)

    def count_armed(self, consumer: str) -> int:
        with self._lock:
            lane = self._lanes.get(consumer)
        if lane is None:
            return 0
        with lane.cond:
            return len(lane.armed) - lane.notices

    def on_push(self, sender: str, msg: Any) -> None:
        """A caller asks for a push (client loop thread): post it, or do nothing."""
        try:
            key, consumer = msgspec.msgpack.decode(msg.arg, type=tuple[str, str])
        except (msgspec.DecodeError, msgspec.ValidationError):
            return None
        if not key:
            self.end(consumer)
        elif not self.push(key, consumer):
            self.declined += 1
            self._notice(consumer, key, REFUSED)
        return None

    def end(self, consumer: str) -> None:
        """The consumer dropped its pair: send the header that ends its thread there."""
        self._notice(consumer, "", ENDED)

    def _notice(self, consumer: str, key: str, what: int) -> None:
        """A header with no tensors: REFUSED (the reader of `key` pulls at once) or ENDED.

        Bounded: while the consumer takes no header (its thread stalled), at most MAX_KEPT
        refusals wait unreceived (it remembers no more than that; a reader whose refusal is
        not sent waits PUSH_WAIT_S, then pulls), plus one ENDED, after which nothing is
        posted (the consumer's thread ends at it: nothing after would ever be received)."""
        import torch

        with self._lock:
            lane = self._lanes.get(consumer)
        if lane is None:
            return
        header = torch.zeros(HEADER_BYTES, dtype=torch.uint8)
        raw: Any = header.numpy()
        _LAST.pack_into(raw, 0, key.encode().ljust(p.KEY_BYTES)[:p.KEY_BYTES], what)
        with lane.cond:
            if lane.closed or lane.ended or (what == REFUSED and lane.notices >= MAX_KEPT):
                return
            try:
                lane.armed.append([lane.group.send([header], 1, TAG_PUSH_HEADER)])
            except Exception:  # noqa: BLE001 - the pair broke already
                return
            lane.ended = what == ENDED
            lane.notices += 1
            lane.cond.notify()
            self._reaper(lane)

    def push(self, key: str, consumer: str, limit: int = MAX_ARMED) -> bool:
        """Post the push of `key` to `consumer`'s pair; False when it cannot be made."""
        import torch

        with self._lock:
            lane = self._lanes.get(consumer)
        lent = p.KEPT.lend(key)
        if lane is None or lent is None:
            return False
        tensors, sizes = lent
        if not tensors or len(tensors) > p.INLINE_SIZES or \
                any(t.device.type != "cpu" for t in tensors):
            return False
        header = torch.zeros(HEADER_BYTES, dtype=torch.uint8)
        raw = header.numpy()
        p.encode_request(raw, key, sizes)
        raw[-1] = 1
        with lane.cond:
            if lane.closed or lane.ended or len(lane.armed) - lane.notices >= limit:
                return False
            try:
                works = [lane.group.send([header], 1, TAG_PUSH_HEADER)]
                works += [lane.group.send([t], 1, TAG_PUSH_FIRST + i)
                          for i, t in enumerate(tensors)]
            except Exception:  # noqa: BLE001 - the pair broke: its thread closes the lane
                return False
            lane.armed.append(works)
            lane.cond.notify()
            self._reaper(lane)
        self.pushed += 1
        return True

    @staticmethod
    def _reaper(lane: _Lane) -> None:
        if lane.reaper is None:
            lane.reaper = threading.Thread(target=_reap, args=(lane,), daemon=True,
                                           name=f"tensor-push-{lane.pair_id[:8]}")
            lane.reaper.start()


def _close(lane: _Lane) -> None:
    with lane.cond:
        lane.closed = True
        lane.cond.notify()


def _reap(lane: _Lane) -> None:
    """Let each push's works go once the consumer received it, oldest first (a push's sends
    must outlive their receive: gloo holds only a weak pointer to a pending send)."""
    while True:
        with lane.cond:
            while not lane.armed and not lane.closed:
                lane.cond.wait()
            if not lane.armed:
                return
            works = lane.armed[0]
        try:
            for work in works:
                work.wait(p.IDLE_WAIT)
        except Exception:  # noqa: BLE001 - the consumer went away: the pair is over
            with lane.cond:
                lane.closed = True
                lane.armed.clear()
            return
        with lane.cond:
            done = lane.armed.popleft()
            if len(done) == 1:  # a header alone: a notice (a push has its tensors' sends too)
                lane.notices -= 1


LANES = PushLanes()
p.KEPT.pushes = LANES  # (the producer takes pushes through it; it does not import this module)


class Pushed:
    """A pushed transfer the consumer took the header of: its buffers and receives."""

    __slots__ = ("key", "sizes", "out", "works", "at")

    def __init__(self, key: str, sizes: list[int], out: list[Any], works: list[Any]) -> None:
        self.key, self.sizes, self.out, self.works = key, sizes, out, works
        self.at = time.monotonic()
