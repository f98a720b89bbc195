"""The push marker: a caller finds (key, producer address) in a descriptor's value without
unpickling it, and nothing in values that are not descriptors (or are malformed)."""

from __future__ import annotations

from zmesh.protocol.messages.runtime import Args, Value
from zmesh.runtime import values
from zmesh.tensor_transport import push
from zmesh.tensor_transport.value import Transported

KEY = "0123456789abcdef0123456789abcdef"


def _packed(obj: object) -> Value:
    s, _nested = values.serialize(obj)
    return Value(data=bytes(values.pack(s)))


def test_a_descriptors_value_names_its_key_and_producer(monkeypatch):
    monkeypatch.setattr(push, "ENABLED", True)
    state = {"key": KEY, "push": push.marker(KEY, "ipc:///tmp/zmesh-x/worker-1", 7,
                                             (4096, 8) + (1 << 40,) * 14)}
    value = _packed(Transported(state))
    found = push.scan([_packed(1), value, value])  # (a key twice in a call: pushed once)
    assert [f[:3] for f in found] == [(KEY, "ipc:///tmp/zmesh-x/worker-1", 1)]
    # the caller that orders the push flags it in the copy it sends: the reader waits for it
    args = push.flagged(Args(data=b"", refs=[_packed(1), value]), found)
    flag = found[0][3]
    assert value.data[flag] == 0 and args.refs[1].data[flag] == 1
    assert len(args.refs[1].data) == len(value.data) and args.refs[0] == _packed(1)
    # the callee finds the flagged ones as the call comes in: the tag and sizes to post
    assert push.flagged_markers(Args(data=b"", refs=[value])) == []
    (mark,) = push.flagged_markers(args)
    assert (mark.key, mark.tag, mark.sizes, mark.address) == (
        KEY, 7, [4096, 8] + [1 << 40] * 14, "ipc:///tmp/zmesh-x/worker-1")
    mark = push.marker(KEY, "ipc:///p")
    assert not push.was_pushed(mark)
    assert push.was_pushed(mark[:flag - value.data.find(push.MAGIC)] + b"\x01" + mark[
        flag - value.data.find(push.MAGIC) + 1:])


def test_other_values_name_nothing(monkeypatch):
    monkeypatch.setattr(push, "ENABLED", True)
    broken = push.MAGIC + b"zz"  # cut short
    bad_key = push.marker("not a hex key!!" + "x" * 17, "ipc:///a", 0, (16,))
    assert push.scan([_packed([1, 2, 3]), _packed({"a": b"b"}), Value(data=b""),
                      _packed(broken), _packed(bad_key),
                      Value(data=bytes(push.marker(KEY, "ipc:///a", 0, (16,))), is_error=True)]) == []
    big = _packed(b"x" * push.SCAN_LIMIT + push.marker(KEY, "ipc:///a", 0, (16,)))
    assert push.scan([big]) == []  # too large to be a descriptor: not searched


def test_off_by_default_no_descriptor_is_named(monkeypatch):
    monkeypatch.setattr(push, "ENABLED", False)
    state = {"key": KEY, "push": push.marker(KEY, "ipc:///p", 0, (16,))}
    assert push.scan([_packed(Transported(state))]) == []


def test_no_push_is_ordered_to_the_producer_itself_or_to_an_odd_address():
    sent = []

    class _Loop:
        def send(self, to: str, msg: object) -> None:
            sent.append(to)

    class _Client:
        loop = _Loop()

    ordered = push.order(_Client(), "ipc:///c", [(KEY, "ipc:///c", 0, 9), (KEY, "http://x", 1, 9),
                                                 (KEY, "ipc:///p", 2, 9)], on_loop=True)
    assert sent == ["ipc:///p"] and ordered == [(KEY, "ipc:///p", 2, 9)]


def test_user_bytes_that_hold_a_marker_are_never_flagged(monkeypatch):
    """Only a descriptor's own marker (the value is a Transported, the marker its "push")
    is found: user bytes that hold MAGIC, a flag, an alphanumeric key and an address are
    not, so the caller never flips a byte of them."""
    import pickle

    monkeypatch.setattr(push, "ENABLED", True)
    lookalike = push.marker(KEY, "ipc:///tmp/zmesh-x/worker-1")
    users = [_packed(lookalike), _packed(b"user data " + lookalike + b" more"),
             _packed({"push": lookalike}), _packed([1, lookalike])]
    assert push.scan(users) == []
    # a descriptor whose result holds such bytes (its skeleton): only its own marker counts
    state = {"key": KEY, "skeleton": {"blob": b"x" + lookalike}, "push": push.marker(
        KEY, "ipc:///p", 3, (16,))}
    value = _packed(Transported(state))
    found = push.scan([value])
    assert [f[:3] for f in found] == [(KEY, "ipc:///p", 0)]
    sent = push.flagged(Args(data=b"", refs=[value]), found).refs[0]
    monkeypatch.setattr("zmesh.tensor_transport.value._materialize", lambda st: st)
    back = pickle.loads(sent.data[sent.data.index(b"\x00", 1) + 1:])
    assert back["skeleton"] == {"blob": b"x" + lookalike}  # the user's bytes, untouched
    assert push.was_pushed(back["push"]) and not push.was_pushed(lookalike)
