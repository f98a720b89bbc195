"""Push at dispatch (gloo): a caller that sends an actor call whose top-level arguments hold a
tensor-transport ref tells the ref's producer, at the same moment, to start the tensors'
sends to the callee, so the consumer's read needs no request round trip.

The three sides:

- the **caller** (`scan` / `order`): a call's top-level ref values are resolved in the caller
  before the call goes out; a descriptor's value carries a marker (`MAGIC`, the key, its push
  tag, the tensors' sizes, the producer's address). For each one found, a `tensor_push`
  query (no reply) goes to the producer, naming the key and the callee's address, just
  before the call itself, and the copy of the descriptor the call carries is flagged;
- the **producer** (`PushLanes`): if it has a gloo pair with that consumer, still keeps the
  key, and fewer than MAX_ARMED pushes on that pair are unreceived, it posts, on the pair's
  first tensors' group, a send of each tensor on its key's own tags (`tensor_tag`), then a
  notice (key, sizes, tag) on the pair's header stream (TAG_PUSH_HEADER). gloo holds a send
  until the peer posts its receive, then writes the data from its loop thread (or at once,
  when the receive was posted first): no Python runs in the producer when the consumer reads;
- the **consumer** (push_in.PushIn): when a call with flagged descriptors comes in, the
  worker's loop thread posts their tensors' receives at once (`receive_early`, from the
  tags and sizes in the markers), before the call waits its turn: the data moves as soon
  as both sides have posted, whichever came first, and the method starts when the call and
  the data are both in. A thread per pair takes each notice as it comes in and posts the
  receives of a push that no call posted (or only marks the one posted early as sent). A
  read of a pushed key waits for its receives and sends no request; else it pulls.

Correctness never rests on the push: a push that cannot be made is not made (no pair yet,
NCCL, too many tensors, key gone, too many unreceived), and the consumer then pulls. A read
waits on a push's receives only once its notice came (the producer sent it): at most
push_wait_s() for the notice, which the producer sends ahead of the tensors. Receives posted
early for a push that is never sent (refused after they were posted, or its order lost)
are never waited on: the read drops the pair (that key's tags are out of step) and pulls
on a new one. Pushes use
tags of their own, per key, so they never match a pull's receives or another key's push. A
push nobody reads is received all the same and kept by the consumer until MAX_KEPT newer
ones wait, or PUSH_KEEP_S passed when the next one comes in, or `empty_cache()`; the
producer lets each go once received.
"""
from __future__ import annotations

import os
import struct
import threading
from collections import deque
from typing import Any

import msgspec

from zmesh.tensor_transport import producer as p

MAGIC = b"\xffzmTTp2"
"""Starts the push marker inside a descriptor's pickled value: MAGIC, a flag byte, the key
(KEY_BYTES), the key's push tag (4 bytes), how many tensors (1 byte) and each one's size in
bytes (8 bytes each), the producer's address length (2 bytes) and the address; integers
little-endian. The tag and sizes let the consumer post its receives when the call arrives."""
ENABLED = os.environ.get("ZMESH_TENSOR_PUSH", "0") == "1"
"""Whether callers order pushes (ZMESH_TENSOR_PUSH=1 in the caller's environment). Off by
default: measured on 2 shared cores (benchmarks/results/stop21/tensor_push.md, stop23/), a
push at dispatch is no faster than the pull there, even with its receives posted when the
call comes in (more threads wake per read: the order through the producer's loop, the
notice through the consumer's push thread). The producer and consumer sides are always on
(they cost an idle thread per pair)."""
SCAN_LIMIT = 4096  # values larger than this are not searched for a marker (descriptors: ~500 B)
TAG_PUSH_HEADER = 1 << 24  # above every pull tag (TAG_FIRST_TENSOR + MAX_TENSORS)
TAG_PUSH_FIRST = TAG_PUSH_HEADER + 1
PUSH_TAGS = 1 << 26
"""A push's i-th tensor goes on TAG_PUSH_FIRST + tag * INLINE_SIZES + i, where `tag` is its
key's (KeptTensors gives each key the next of PUSH_TAGS in turn; the largest gloo tag is
below 2**31), so a consumer can post a push's receives in any order (when its call arrives,
or when the push's notice does), and pushes of different keys never match each other's."""
BLOCK = p.INLINE_SIZES
HEADER_BYTES = p.REQUEST_BYTES + 8
"""A push header: the request's layout (key, count, sizes), the key's tag (4 bytes), then a
byte set to 1 last: the consumer sees a header has come in by that byte (its receive's work
says nothing until it is waited on, and a wait with a timeout would close the pair)."""
_TAG = struct.Struct("<I")
MAX_ARMED = 16
"""Unreceived pushes per pair, in the producer: past it a push is refused (the consumer
pulls). A push's sends hold its tensors until received, even after their key was freed; the
consumer posts every push's receives (at its call, else at its header), so only a consumer
that stalled leaves this many unreceived."""
MAX_KEPT = 4  # received pushes a consumer keeps for a later read, per pair
MAX_EARLY = 8
"""A consumer posts a push's receives when its call comes in (before the header) for at most
this many pushes per pair whose header has not come: past it the header posts them. Bounds
what a push the producer never sent (refused, or its order lost) holds: its receives stay
posted, matched by a later push of the same key if one comes (tags are per key)."""
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


def tensor_tag(tag: int, i: int) -> int:
    """The gloo tag of a push's i-th tensor, for the key's push tag `tag`."""
    return TAG_PUSH_FIRST + (tag % PUSH_TAGS) * BLOCK + i


def marker(key: str, address: str, tag: int = 0, sizes: tuple[int, ...] = ()) -> bytes:
    """MAGIC, a flag byte (0; a caller that ordered a push sets it to 1 in the copy it
    sends), the key, its push tag, the tensors' sizes, the address's length and the
    address."""
    raw = address.encode()
    return (MAGIC + b"\x00" + key.encode().ljust(p.KEY_BYTES)[:p.KEY_BYTES]
            + _TAG.pack(tag % PUSH_TAGS) + bytes([len(sizes)])
            + b"".join(_SIZE.pack(n) for n in sizes) + _MARK.pack(len(raw)) + raw)


_SIZE = struct.Struct("<q")


class Marked:
    """A marker read back: where its flag is, whether set, the key, tag, sizes, address."""

    __slots__ = ("flag_at", "flagged", "key", "tag", "sizes", "address")

    def __init__(self, flag_at: int, flagged: bool, key: str, tag: int, sizes: list[int],
                 address: str) -> None:
        self.flag_at, self.flagged, self.key, self.tag = flag_at, flagged, key, tag
        self.sizes, self.address = sizes, address


def read_marker(data: bytes) -> Marked | None:
    """The marker of a descriptor's value (`data`, up to SCAN_LIMIT bytes), or None when
    `data` is not one or the marker is malformed (see _marker_at)."""
    if not data or len(data) > SCAN_LIMIT:
        return None
    i = _marker_at(data)
    if i < 0:
        return None
    flag = i + len(MAGIC)
    at = flag + 1
    key = data[at:at + p.KEY_BYTES]
    at += p.KEY_BYTES
    if len(data) < at + 5:
        return None
    (tag,) = _TAG.unpack_from(data, at)
    count = data[at + 4]
    at += 5
    if count > p.INLINE_SIZES or len(data) < at + 8 * count + 2:
        return None
    sizes = [_SIZE.unpack_from(data, at + 8 * j)[0] for j in range(count)]
    at += 8 * count
    (n,) = _MARK.unpack_from(data, at)
    address = data[at + 2:at + 2 + n]
    if at + 2 + n != len(data) - len(_TAIL) or not key.isalnum() or data[flag] > 1 \
            or tag >= PUSH_TAGS or any(s < 0 for s in sizes):
        return None  # the address must end the marker exactly
    try:
        return Marked(flag, data[flag] == 1, key.decode(), tag, sizes, address.decode())
    except UnicodeDecodeError:
        return None


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
    keys = set()
    for index, value in enumerate(values):
        if getattr(value, "is_error", False):
            continue
        mark = read_marker(bytes(getattr(value, "data", b"")))
        if mark is None or not mark.sizes or mark.key in keys:
            continue  # (one push of a key per call: a second argument with it pulls)
        keys.add(mark.key)
        found.append((mark.key, mark.address, index, mark.flag_at))
    return found


def flagged_markers(args: Any) -> list[Marked]:
    """The markers a caller flagged among a call's arguments (the consumer, as it arrives)."""
    found = []
    for value in getattr(args, "refs", ()):
        if value is None or value.is_error:
            continue
        data = value.data
        if len(data) > SCAN_LIMIT or MAGIC not in data:
            continue
        mark = read_marker(bytes(data))
        if mark is not None and mark.flagged and mark.sizes:
            found.append(mark)
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


def orderable(consumer: str, pushes: list[Push]) -> list[Push]:
    """The pushes a caller may order to the process at `consumer` (not to the producer
    itself: it reads its own tensors; only to an ipc or tcp address)."""
    return [push for push in pushes
            if push[1] != consumer and push[1].startswith(("ipc://", "tcp://"))]


def order(client: Any, consumer: str, pushes: list[Push], on_loop: bool) -> list[Push]:
    """Ask each producer to push its key to the process at `consumer` (no reply is sent;
    from the client's loop thread, or any thread with `on_loop` False); the pushes ordered.
    Sent before the call: the producer's sends are posted while the call travels, and the
    callee's receives, posted when the call comes in, find them."""
    global pushes_ordered
    from zmesh.protocol.messages import runtime as m

    ordered = []
    for push in orderable(consumer, pushes):
        key, address = push[0], push[1]
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

    def __init__(self, pair_id: str, group: Any, notices: Any) -> None:
        self.pair_id = pair_id
        self.group = group
        self.notices_group = notices
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

    def open(self, consumer: str, pair_id: str, group: Any, notices: Any = None) -> None:
        """A gloo pair with the process at `consumer` is up (its serving thread): pushes'
        tensors go on `group`, their notices on `notices` (the same group when not given).
        Not one group for both: the consumer's thread posts the next notice's receive as a
        notice comes in, while the push's data may be written on that group from a thread
        here holding its pair's lock, and gloo's loop thread then spins on epoll_wait
        until the write is done (the producer's CPU per 64 MB push doubled)."""
        lane = _Lane(pair_id, group, group if notices is None else notices)
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
            arg = msgspec.msgpack.decode(msg.arg, type=list[str])
        except (msgspec.DecodeError, msgspec.ValidationError):
            return None
        if len(arg) not in (2, 3):
            return None
        key, consumer = arg[0], arg[1]
        if not key:
            self.end(consumer, arg[2] if len(arg) == 3 else "")
        elif not self.push(key, consumer, MAX_ARMED):
            self.declined += 1
            self._notice(consumer, key, REFUSED)
        return None

    def end(self, consumer: str, pair_id: str = "") -> None:
        """The consumer dropped its pair (`pair_id`; any, when not named): send the header
        that ends its thread there."""
        with self._lock:
            lane = self._lanes.get(consumer)
        if lane is not None and (not pair_id or lane.pair_id == pair_id):
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
                lane.armed.append([lane.notices_group.send([header], 1, TAG_PUSH_HEADER)])
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
        tag = p.KEPT.tag(key)
        if lane is None or lent is None or tag is None:
            return False
        tensors, sizes = lent
        if not tensors or len(tensors) > p.INLINE_SIZES or \
                any(t.device.type != "cpu" for t in tensors):
            return False
        header = torch.zeros(HEADER_BYTES, dtype=torch.uint8)
        raw: Any = header.numpy()
        p.encode_request(raw, key, sizes)
        _TAG.pack_into(raw, p.REQUEST_BYTES, tag % PUSH_TAGS)
        raw[-1] = 1
        with lane.cond:
            if lane.closed or lane.ended or len(lane.armed) - lane.notices >= limit:
                return False
            try:
                # the tensors' sends first: a consumer that posted their receives when the
                # call came in gets the data from gloo's loop thread at once; the header
                # (behind them) confirms the push, or has the consumer post them if not
                # the notice on the pair's header stream (the consumer's read waits for it;
                # its thread posts the receives if the call did not), then the tensors (a
                # consumer that posted their receives when the call came in gets them at
                # once, from here or from gloo's loop thread)
                works = [lane.notices_group.send([header], 1, TAG_PUSH_HEADER)]
                works += [lane.group.send([t], 1, tensor_tag(tag, i))
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
