"""The consumer's side of pushes on one pair (gloo): the receives of each push, posted when
its call comes in or when its notice does, and the pushes posted and not read yet (see
zmesh.tensor_transport.push for the protocol)."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Any

from zmesh.tensor_transport import producer as p
from zmesh.tensor_transport import push as pu
from zmesh.tensor_transport.pool import POOL


class Pushed:
    """A push's receives in the consumer, posted when its call came in (`claimed`) or when
    its notice did; `noticed` once the notice came (the producer sent it: its receives
    complete, so they may be waited on unbounded; before, a read waits a bounded time)."""

    __slots__ = ("key", "sizes", "out", "works", "at", "noticed", "claimed")

    def __init__(self, key: str, sizes: list[int], out: list[Any], works: list[Any],
                 noticed: bool = True, claimed: bool = False) -> None:
        self.key, self.sizes, self.out, self.works = key, sizes, out, works
        self.at = time.monotonic()
        self.noticed, self.claimed = noticed, claimed


class PushIn:
    """The consumer's side of pushes on one pair (gloo). Each push's receives (its own
    header's and its tensors') are posted when its call comes in (`early`, on the worker's
    loop thread, from the tag and sizes in the call's descriptor), or else when its notice
    comes in on the pair's header stream: a thread waits for each notice and posts the push
    the call did not (or claims none). A read waits for the push's own header (bounded),
    then for its tensors. Tags are per key, so receives posted early and by notices never
    match another key's sends. See zmesh.tensor_transport.push."""

    def __init__(self, group: Any, notices: Any = None) -> None:
        """Pushes' tensors come on `group`, their notices on `notices` (the same group when
        not given; see push.PushLanes.open)."""
        import torch

        self.group = group
        self.notices = group if notices is None else notices
        self.header = torch.zeros(pu.HEADER_BYTES, dtype=torch.uint8)
        self.header_host: Any = self.header.numpy()
        self.lock = threading.Lock()  # the fields below
        self.came = threading.Condition(self.lock)  # a notice came in (or the thread ended)
        self.refused: OrderedDict[str, None] = OrderedDict()  # keys the producer did not push
        self.let_go: OrderedDict[str, None] = OrderedDict()  # pushes let go unread (_bound)
        self.ended = False
        self.broken = False
        """A push posted early was refused (or its header never came): its receives stay
        posted on the key's tags, out of step with a later push of that key, so the pair
        is dropped by the next read (see fetch)."""
        self.waiting = self.notices.recv([self.header], 0, pu.TAG_PUSH_HEADER)
        self.transfers: list[Pushed] = []  # posted, not read yet, oldest first
        self.watcher = threading.Thread(target=self._watch, daemon=True, name="tensor-push-in")
        self.watcher.start()

    @property
    def kept(self) -> list[Pushed]:
        """The pushes noticed and not read yet (for tests and tools)."""
        with self.lock:
            return [t for t in self.transfers if t.noticed]

    def _watch(self) -> None:
        try:
            while True:
                self.waiting.wait(p.IDLE_WAIT)
                with self.lock:
                    if not self._take_header():
                        return
                    self.came.notify_all()
        except Exception:  # noqa: BLE001 - the pair broke (the producer went away)
            pass
        finally:
            with self.lock:
                self.ended = True
                self.came.notify_all()

    def early(self, key: str, tag: int, sizes: list[int]) -> None:
        """A call that reads the push of `key` came in (loop thread): post its receives now,
        so the data moves as soon as the producer's sends are posted too; or claim the push
        its notice posted already. None past MAX_EARLY unnoticed (the notice posts them)."""
        with self.lock:
            if self.ended or self.broken or key in self.refused:
                return  # (refused: the read pulls)
            unnoticed = 0
            for t in self.transfers:
                if t.key == key and t.noticed and not t.claimed:
                    t.claimed = True
                    return
                unnoticed += not t.noticed
            if unnoticed >= pu.MAX_EARLY:
                return
            self.transfers.append(self._post(key, tag, sizes, noticed=False, claimed=True))

    def _post(self, key: str, tag: int, sizes: list[int], noticed: bool,
              claimed: bool) -> Pushed:
        import torch

        out = [POOL.empty([n], torch.uint8) for n in sizes]
        works = [self.group.recv([t], 0, pu.tensor_tag(tag, i)) for i, t in enumerate(out)]
        return Pushed(key, sizes, out, works, noticed, claimed)

    def wait_for(self, key: str) -> None:
        """A caller ordered the push of `key` here: wait until its notice came (the producer
        sent it), the producer said it refused it, the pair ended or broke, or PUSH_WAIT_S
        passed; receives posted early for it by then will never be waited on: the pair is
        out of step (broken)."""
        with self.lock:
            self.came.wait_for(lambda: self._noticed(key) is not None
                               or key in self.refused or key in self.let_go or self.ended
                               or self.broken, pu.push_wait_s())
            if self._noticed(key) is None and any(t.key == key for t in self.transfers):
                self.broken = True

    def _noticed(self, key: str) -> Pushed | None:
        return next((t for t in self.transfers if t.key == key and t.noticed), None)

    def _take_header(self) -> bool:
        """The notice that came in (its receive waited on): the push posted early for its
        key (the oldest) is noticed, or its receives are posted now; the next notice's
        receive is posted (the lock held). False for the last one (see _end_pushes), or
        one that makes no sense."""
        key, count, sizes = p.decode_request(self.header_host)
        (tag,) = pu._TAG.unpack_from(self.header_host, p.REQUEST_BYTES)
        if count == pu.REFUSED:
            self.header_host[-1] = 0
            self.waiting = self.notices.recv([self.header], 0, pu.TAG_PUSH_HEADER)
            self._refuse(key)
            if any(t.key == key and not t.noticed for t in self.transfers):
                self.broken = True  # posted early, never to be sent
            return True
        if not 0 <= count <= len(sizes) or tag >= pu.PUSH_TAGS:
            return False
        sizes = sizes[:count]
        self.header_host[-1] = 0
        self.waiting = self.notices.recv([self.header], 0, pu.TAG_PUSH_HEADER)
        posted = next((t for t in self.transfers if t.key == key and not t.noticed), None)
        if posted is None:
            self.transfers.append(self._post(key, tag, sizes, noticed=True, claimed=False))
        elif posted.sizes == sizes:
            posted.noticed = True
        else:  # a descriptor whose sizes are not what its producer sends
            self.broken = True
        self._bound()
        return True

    def _refuse(self, key: str, into: OrderedDict[str, None] | None = None) -> None:
        keys = self.refused if into is None else into
        keys[key] = None
        while len(keys) > pu.MAX_KEPT:  # (reads that never came)
            keys.popitem(last=False)

    def take(self, key: str, sizes: list[int], metas: list[tuple[list[int], str]],
             dtypes: list[Any]) -> Pushed | None:
        """The push of `key` noticed here (its receives posted, maybe not complete: they
        will), or None (then pull)."""
        with self.lock:
            self.let_go.pop(key, None)
            if key in self.refused:
                del self.refused[key]
                return None
            kept = self._noticed(key)
            if kept is None or kept.sizes != sizes:
                return None
            self.transfers.remove(kept)
        kept.out = [b.view(dt).reshape(shape)
                    for b, (shape, _), dt in zip(kept.out, metas, dtypes)]
        return kept

    def _bound(self) -> None:
        """Let the oldest noticed pushes go past MAX_KEPT or PUSH_KEEP_S (their receives
        complete: the producer sent them); a read of one let go pulls at once."""
        now = time.monotonic()
        noticed = [t for t in self.transfers if t.noticed]
        while noticed:
            t = noticed[0]
            if len(noticed) <= pu.MAX_KEPT and now - t.at < pu.PUSH_KEEP_S:
                break
            del noticed[0]
            self.transfers.remove(t)
            _let_go(t)
            if not any(o.key == t.key for o in self.transfers):
                self._refuse(t.key, self.let_go)

    def clear(self) -> None:
        with self.lock:
            for t in [t for t in self.transfers if t.noticed]:
                self.transfers.remove(t)
                _let_go(t)


def _let_go(pushed: Pushed) -> None:
    """Let a noticed push go once received (a receive's buffer must outlive it)."""
    for work in pushed.works:
        work.wait()
