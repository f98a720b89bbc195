"""The push marker: a caller finds (key, producer address) in a descriptor's value without
unpickling it, and nothing in values that are not descriptors (or are malformed)."""

from __future__ import annotations

from zmesh.protocol.messages.runtime import Value
from zmesh.runtime import values
from zmesh.tensor_transport import push
from zmesh.tensor_transport.value import Transported

KEY = "0123456789abcdef0123456789abcdef"


def _packed(obj: object) -> Value:
    s, _nested = values.serialize(obj)
    return Value(data=bytes(values.pack(s)))


def test_a_descriptors_value_names_its_key_and_producer(monkeypatch):
    monkeypatch.setattr(push, "ENABLED", True)
    state = {"key": KEY, "push": push.marker(KEY, "ipc:///tmp/zmesh-x/worker-1")}
    found = push.scan([_packed(Transported(state))])
    assert found == [(KEY, "ipc:///tmp/zmesh-x/worker-1")]


def test_other_values_name_nothing(monkeypatch):
    monkeypatch.setattr(push, "ENABLED", True)
    broken = push.MAGIC + b"zz"  # cut short
    bad_key = push.marker("not a hex key!!" + "x" * 17, "ipc:///a")
    assert push.scan([_packed([1, 2, 3]), _packed({"a": b"b"}), Value(data=b""),
                      _packed(broken), _packed(bad_key),
                      Value(data=bytes(push.marker(KEY, "ipc:///a")), is_error=True)]) == []
    big = _packed(b"x" * push.SCAN_LIMIT + push.marker(KEY, "ipc:///a"))
    assert push.scan([big]) == []  # too large to be a descriptor: not searched


def test_off_by_default_no_descriptor_is_named(monkeypatch):
    monkeypatch.setattr(push, "ENABLED", False)
    state = {"key": KEY, "push": push.marker(KEY, "ipc:///p")}
    assert push.scan([_packed(Transported(state))]) == []


def test_no_push_is_ordered_to_the_producer_itself_or_to_an_odd_address():
    sent = []

    class _Loop:
        def send(self, to: str, msg: object) -> None:
            sent.append(to)

    class _Client:
        loop = _Loop()

    push.order(_Client(), "ipc:///c", [(KEY, "ipc:///c"), (KEY, "http://x"),
                                       (KEY, "ipc:///p")], on_loop=True)
    assert sent == ["ipc:///p"]
