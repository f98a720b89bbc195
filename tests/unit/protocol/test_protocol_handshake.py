"""The sans-IO handshake: who is welcomed, who is refused, and why."""

from __future__ import annotations

import hmac

import pytest

from zmesh.errors import HandshakeError
from zmesh.protocol.codec import encode, unpack
from zmesh.protocol.handshake import (
    PROTOCOL_VERSION,
    HandshakeState,
    Peer,
    check_hello,
    expect_welcome,
    make_hello,
)
from zmesh.protocol.messages.common import Ping
from zmesh.protocol.messages.handshake import Hello, Refuse, Welcome

KEY = b"cluster-secret-0123456789abcdef!"


def hello(**overrides: object) -> Hello:
    fields: dict[str, object] = {
        "sender": "w1",
        "role": "worker",
        "credential": KEY,
        "incarnation": 0,
    }
    fields.update(overrides)
    return make_hello(**fields)  # type: ignore[arg-type]


def state() -> HandshakeState:
    return HandshakeState(node_id="node-a", expected_credential=KEY)


def test_matching_hello_is_welcomed_with_our_node_id_and_version() -> None:
    reply = check_hello(hello(), expected_credential=KEY, node_id="node-a")
    assert reply == Welcome(protocol_version=PROTOCOL_VERSION, node_id="node-a")


def test_version_mismatch_is_refused_naming_expected_and_got() -> None:
    old = hello(protocol_version=PROTOCOL_VERSION + 1)
    reply = check_hello(old, expected_credential=KEY, node_id="n")
    assert reply == Refuse(
        f"protocol version mismatch: expected {PROTOCOL_VERSION}, got {PROTOCOL_VERSION + 1}"
    )


def test_wrong_credential_is_refused_without_echoing_either_credential() -> None:
    reply = check_hello(hello(credential=b"guess"), expected_credential=KEY, node_id="n")
    assert isinstance(reply, Refuse)
    assert reply.reason == (
        "credential mismatch: expected the cluster credential, got a different 5-byte credential"
    )
    assert "guess" not in reply.reason
    assert KEY.decode() not in reply.reason


def test_missing_credential_is_refused_saying_none_came() -> None:
    reply = check_hello(hello(credential=b""), expected_credential=KEY, node_id="n")
    assert reply == Refuse("credential mismatch: expected the cluster credential, got none")


def test_credentials_are_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    check_hello(hello(credential=b"x"), expected_credential=KEY, node_id="n")
    assert calls == [(b"x", KEY)]


def test_no_expected_credential_accepts_any() -> None:
    reply = check_hello(hello(credential=b"whatever"), expected_credential=None, node_id="n")
    assert isinstance(reply, Welcome)


def test_version_is_checked_before_the_credential() -> None:
    both_wrong = hello(protocol_version=99, credential=b"")
    reply = check_hello(both_wrong, expected_credential=KEY, node_id="n")
    assert isinstance(reply, Refuse)
    assert reply.reason.startswith("protocol version mismatch")


def test_unknown_role_from_the_wire_is_refused_naming_the_valid_ones() -> None:
    odd = Hello(protocol_version=PROTOCOL_VERSION, credential=KEY, sender="x", role="admin")
    reply = check_hello(odd, expected_credential=KEY, node_id="n")
    assert reply == Refuse("unknown role 'admin': expected one of client, driver, node, worker")


def test_empty_sender_from_the_wire_is_refused() -> None:
    anon = Hello(protocol_version=PROTOCOL_VERSION, credential=KEY, sender="", role="node")
    reply = check_hello(anon, expected_credential=KEY, node_id="n")
    assert isinstance(reply, Refuse)
    assert "empty sender" in reply.reason


@pytest.mark.parametrize(
    ("overrides", "error", "message"),
    [
        ({"sender": ""}, ValueError, "sender must be a non-empty str, got ''"),
        ({"role": "boss"}, ValueError, "unknown role 'boss': expected one of"),
        ({"credential": "text"}, TypeError, "credential must be bytes, got str"),
        ({"incarnation": -1}, ValueError, "incarnation must be an int >= 0, got -1"),
    ],
)
def test_make_hello_refuses_bad_input_naming_it(
    overrides: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        hello(**overrides)


def test_expect_welcome_returns_the_welcome() -> None:
    welcome = Welcome(protocol_version=PROTOCOL_VERSION, node_id="node-a")
    assert expect_welcome(welcome) is welcome


def test_expect_welcome_raises_the_refusal_reason() -> None:
    with pytest.raises(HandshakeError, match="handshake refused by peer: bad credential"):
        expect_welcome(Refuse("bad credential"))


def test_expect_welcome_raises_on_any_other_answer() -> None:
    with pytest.raises(HandshakeError, match="expected Welcome or Refuse .*got Ping"):
        expect_welcome(Ping(seq=1))


def test_expect_welcome_raises_on_a_welcome_in_another_version() -> None:
    with pytest.raises(HandshakeError, match="protocol version 7, expected 1"):
        expect_welcome(Welcome(protocol_version=7, node_id="n"), protocol_version=1)


def test_first_message_that_is_not_hello_is_refused_and_leaves_no_state() -> None:
    hs = state()
    reply = hs.receive(b"conn-1", Ping(seq=1))
    assert reply == Refuse("expected Hello as the first message, got Ping")
    assert hs.peer(b"conn-1") is None
    assert dict(hs.peers) == {}
    assert hs.refused == 1


def test_welcomed_connection_has_its_later_messages_handled() -> None:
    hs = state()
    assert isinstance(hs.receive(b"conn-1", hello()), Welcome)
    assert hs.peer(b"conn-1") == Peer("w1", "worker", 0, PROTOCOL_VERSION)
    assert hs.receive(b"conn-1", Ping(seq=1)) is None
    # Another connection is not covered by conn-1's handshake.
    assert isinstance(hs.receive(b"conn-2", Ping(seq=1)), Refuse)


def test_refused_hello_does_not_admit_the_connection() -> None:
    hs = state()
    assert isinstance(hs.receive(b"c", hello(credential=b"nope")), Refuse)
    assert isinstance(hs.receive(b"c", Ping(seq=1)), Refuse)
    assert hs.refused == 2


def test_failed_re_hello_drops_an_accepted_connection() -> None:
    hs = state()
    hs.receive(b"c", hello())
    assert isinstance(hs.receive(b"c", hello(credential=b"stolen")), Refuse)
    assert hs.peer(b"c") is None


def test_repeated_hello_is_welcomed_again() -> None:
    hs = state()
    first = hs.receive(b"c", hello())
    assert hs.receive(b"c", hello()) == first
    assert len(hs.peers) == 1


def test_forgotten_connection_must_say_hello_again() -> None:
    hs = state()
    hs.receive(b"c", hello())
    hs.forget(b"c")
    hs.forget(b"never-seen")
    assert isinstance(hs.receive(b"c", Ping(seq=1)), Refuse)


def test_stale_incarnation_of_a_sender_is_refused() -> None:
    hs = state()
    hs.receive(b"new", hello(incarnation=3))
    reply = hs.receive(b"old", hello(incarnation=2))
    assert reply == Refuse("stale incarnation of 'w1': expected >= 3, got 2")
    assert hs.peer(b"old") is None


def test_newer_incarnation_evicts_connections_of_the_older_one() -> None:
    hs = state()
    hs.receive(b"old", hello(incarnation=1))
    hs.receive(b"other", hello(sender="w2"))
    assert isinstance(hs.receive(b"new", hello(incarnation=2)), Welcome)
    assert set(hs.peers) == {b"new", b"other"}


def test_peers_view_is_read_only() -> None:
    hs = state()
    hs.receive(b"c", hello())
    with pytest.raises(TypeError):
        hs.peers[b"x"] = Peer("a", "node", 0, 1)  # type: ignore[index]


def test_state_refuses_a_credential_that_is_not_bytes() -> None:
    with pytest.raises(TypeError, match="expected_credential must be bytes or None, got str"):
        HandshakeState(node_id="n", expected_credential="key")  # type: ignore[arg-type]


def test_handshake_over_the_wire_format() -> None:
    hs = state()
    received, _ = unpack([encode(hello(sender="driver-1", role="driver"))])
    reply = hs.receive(b"id", received)
    answer, _ = unpack([encode(reply)])  # type: ignore[arg-type]
    assert expect_welcome(answer).node_id == "node-a"
    assert hs.peer(b"id") == Peer("driver-1", "driver", 0, PROTOCOL_VERSION)
