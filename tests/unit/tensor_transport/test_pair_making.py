"""Pairing with one producer does not hold up fetches from the others.

Making a pair is a query to the producer (up to CONNECT_TIMEOUT_S when it is dead) and a
rendezvous (up to the store's timeout when it never comes). That used to run under the lock
that every fetch of the process takes to find its pair, so one thread pairing with a dead
producer stalled every other thread's fetch from live producers for as long. Checked with
stand-ins for the pair (no producer, no groups)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import pytest

from zmesh.tensor_transport import consumer
from zmesh.tensor_transport.types import TensorTransportError

_DEADLINE_S = 60.0


class _StandIn:
    def __init__(self, address: str) -> None:
        self.address = address
        self.lock = threading.Lock()


@pytest.fixture
def pairs(monkeypatch: pytest.MonkeyPatch) -> OrderedDict[tuple[str, str], Any]:
    table: OrderedDict[tuple[str, str], Any] = OrderedDict()
    monkeypatch.setattr(consumer, "_pairs", table)
    return table


def _in_thread(fn: Any, *args: Any) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(fn(*args))
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            out.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def test_a_pair_being_made_does_not_hold_up_another_producers_fetch(
        monkeypatch: pytest.MonkeyPatch, pairs: OrderedDict[tuple[str, str], Any]) -> None:
    asked = threading.Event()
    answer = threading.Event()

    def slow_pair(address: str, backend: str) -> _StandIn:
        asked.set()
        assert answer.wait(_DEADLINE_S), "the test never let the pairing finish"
        return _StandIn(address)

    monkeypatch.setattr(consumer, "_Pair", slow_pair)
    live = pairs[("live", "gloo")] = _StandIn("live")
    thread, made = _in_thread(consumer._pair_for, "silent", "gloo")
    try:
        assert asked.wait(_DEADLINE_S)
        finder, found = _in_thread(consumer._pair_for, "live", "gloo")
        finder.join(10)  # (a generous bound: finding a pair is a dict lookup)
        assert not finder.is_alive(), "finding an existing pair waited for another being made"
        assert found == [live]
    finally:
        answer.set()
        thread.join(_DEADLINE_S)
    assert isinstance(made[0], _StandIn) and pairs[("silent", "gloo")] is made[0]


def test_threads_pairing_with_one_producer_at_once_make_one_pair(
        monkeypatch: pytest.MonkeyPatch, pairs: OrderedDict[tuple[str, str], Any]) -> None:
    made: list[_StandIn] = []
    go = threading.Event()

    def pair(address: str, backend: str) -> _StandIn:
        assert go.wait(_DEADLINE_S)
        made.append(_StandIn(address))
        return made[-1]

    monkeypatch.setattr(consumer, "_Pair", pair)
    runs = [_in_thread(consumer._pair_for, "p", "gloo") for _ in range(4)]
    go.set()
    for thread, _ in runs:
        thread.join(_DEADLINE_S)
    assert len(made) == 1
    assert all(out == [made[0]] for _, out in runs)


def test_a_failed_pairing_is_tried_again_by_the_next_fetch(
        monkeypatch: pytest.MonkeyPatch, pairs: OrderedDict[tuple[str, str], Any]) -> None:
    tries: list[str] = []

    def pair(address: str, backend: str) -> _StandIn:
        tries.append(address)
        if len(tries) == 1:
            raise TensorTransportError("the producer did not answer")
        return _StandIn(address)

    monkeypatch.setattr(consumer, "_Pair", pair)
    with pytest.raises(TensorTransportError):
        consumer._pair_for("p", "gloo")
    assert isinstance(consumer._pair_for("p", "gloo"), _StandIn)
    assert tries == ["p", "p"] and list(pairs) == [("p", "gloo")]
