"""The consumer's side of pushes on one pair (PushIn), over a fake gloo group: a push's
receives are posted when its call comes in (`early`, on the key's own tags) and its notice
then posts nothing; a notice that comes first posts them and the call posts nothing; a push
refused after its receives were posted breaks the pair (its key's tags are out of step);
a read takes a push only once its notice came (one that never comes breaks the pair); at most MAX_EARLY unnoticed pushes are posted."""

from __future__ import annotations

import threading

import pytest

from zmesh.tensor_transport import producer as p
from zmesh.tensor_transport import push as pu
from zmesh.tensor_transport.push_in import PushIn

torch = pytest.importorskip("torch")

KEY, OTHER = "ab" * 16, "cd" * 16


class _Work:
    def __init__(self) -> None:
        self.done = threading.Event()

    def wait(self, timeout: object = None) -> bool:
        self.done.wait()  # (the header stream's, until the test delivers a notice)
        return True


class _Group:
    """Receives posted, by tag, in order."""

    def __init__(self) -> None:
        self.recvs: list[tuple[int, object, _Work]] = []

    def recv(self, tensors: list, peer: int, tag: int) -> _Work:
        work = _Work()
        self.recvs.append((tag, tensors[0], work))
        return work

    def tags(self) -> list[int]:
        return [tag for tag, _, _ in self.recvs if tag != pu.TAG_PUSH_HEADER]

    def headers(self) -> int:
        return sum(tag == pu.TAG_PUSH_HEADER for tag, _, _ in self.recvs)


def _notice(push_in: PushIn, group: _Group, key: str, tag: int, sizes: list[int],
            refused: bool = False) -> None:
    """The producer's notice comes in on the header stream; wait until the thread took it
    (it posts the next notice's receive)."""
    before = group.headers()
    raw = push_in.header_host
    if refused:
        pu._LAST.pack_into(raw, 0, key.encode(), pu.REFUSED)
    else:
        p.encode_request(raw, key, sizes)
        pu._TAG.pack_into(raw, p.REQUEST_BYTES, tag)
    raw[-1] = 1
    [work for tag_, _, work in group.recvs if tag_ == pu.TAG_PUSH_HEADER][-1].done.set()
    with push_in.lock:
        assert push_in.came.wait_for(lambda: group.headers() > before, 30)


def test_a_push_posted_when_its_call_came_in_is_only_marked_sent_by_its_notice():
    group = _Group()
    push_in = PushIn(group)
    push_in.early(KEY, 5, [8, 16])  # the call came in: its receives go now, on 5's tags
    assert group.tags() == [pu.tensor_tag(5, 0), pu.tensor_tag(5, 1)]
    assert push_in.kept == []  # not noticed yet: nothing may wait on it unbounded
    _notice(push_in, group, KEY, 5, [8, 16])
    assert group.tags() == [pu.tensor_tag(5, 0), pu.tensor_tag(5, 1)]  # nothing more
    (kept,) = push_in.kept
    assert kept.claimed and kept.noticed and kept.sizes == [8, 16]
    taken = push_in.take(KEY, [8, 16], [([2], "float32"), ([4], "float32")],
                         [torch.float32, torch.float32])
    assert taken is kept and [tuple(t.shape) for t in taken.out] == [(2,), (4,)]


def test_a_notice_that_comes_before_the_call_posts_and_the_call_posts_nothing():
    group = _Group()
    push_in = PushIn(group)
    _notice(push_in, group, KEY, 9, [8])
    assert group.tags() == [pu.tensor_tag(9, 0)]
    push_in.early(KEY, 9, [8])
    assert group.tags() == [pu.tensor_tag(9, 0)]
    (kept,) = push_in.kept
    assert kept.claimed
    # a second call with the same ref posts its own (the producer pushes it again)
    push_in.early(KEY, 9, [8])
    assert group.tags() == [pu.tensor_tag(9, 0)] * 2


def test_a_push_refused_after_its_receives_were_posted_breaks_the_pair():
    group = _Group()
    push_in = PushIn(group)
    push_in.early(KEY, 3, [8])
    _notice(push_in, group, KEY, 0, [], refused=True)
    assert push_in.broken  # its receives stay posted on 3's tags: the read takes a new pair
    assert push_in.take(KEY, [8], [([2], "float32")], [torch.float32]) is None
    push_in.early(OTHER, 4, [8])  # nothing more is posted on a broken pair
    assert group.tags() == [pu.tensor_tag(3, 0)]


def test_a_refused_push_not_posted_yet_is_not_posted_by_its_call():
    group = _Group()
    push_in = PushIn(group)
    _notice(push_in, group, KEY, 0, [], refused=True)
    push_in.early(KEY, 3, [8])
    assert group.tags() == [] and not push_in.broken
    assert push_in.take(KEY, [8], [([2], "float32")], [torch.float32]) is None


def test_a_read_waits_for_the_notice_and_one_that_never_comes_breaks_the_pair(monkeypatch):
    group = _Group()
    push_in = PushIn(group)
    push_in.early(KEY, 7, [8])
    push_in.early(OTHER, 8, [8])
    # receives posted, no notice: nothing takes them (they may never be filled)
    assert push_in.take(KEY, [8], [([2], "float32")], [torch.float32]) is None
    _notice(push_in, group, KEY, 7, [8])
    push_in.wait_for(KEY)  # returns at once: noticed
    assert not push_in.broken
    assert push_in.take(KEY, [8], [([2], "float32")], [torch.float32]) is not None
    monkeypatch.setenv(pu.PUSH_WAIT_ENV, "0.05")
    push_in.wait_for(OTHER)  # its order was lost: the wait ends, the pair is out of step
    assert push_in.broken


def test_at_most_max_early_unnoticed_pushes_are_posted_by_calls():
    group = _Group()
    push_in = PushIn(group)
    for i in range(pu.MAX_EARLY + 3):
        push_in.early(f"{i:032x}", i, [8])
    assert len(group.tags()) == pu.MAX_EARLY  # the rest wait for their notices
    _notice(push_in, group, f"{pu.MAX_EARLY:032x}", pu.MAX_EARLY, [8])
    assert group.tags()[-1] == pu.tensor_tag(pu.MAX_EARLY, 0)
