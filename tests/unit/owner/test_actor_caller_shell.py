"""The actor caller's shell (`runtime/owner/actor_calls.py`) driven by hand: its loop, node
and workers are recorded, so an order of news that a real mesh produces only now and then
is played exactly."""

from __future__ import annotations

from typing import Any

from zmesh.errors import ActorDiedError
from zmesh.protocol.messages import runtime as m
from zmesh.runtime import values
from zmesh.runtime.owner.actor_calls import DEATH_GRACE_S, ActorCaller

AID = b"a" * 16


class _Loop:
    def __init__(self) -> None:
        self.soon: list[Any] = []
        self.later: list[tuple[float, Any]] = []
        self.sent: list[tuple[str, Any]] = []

    def clock(self) -> float:
        return 0.0

    def call_soon(self, fn: Any, *args: Any) -> None:
        self.soon.append(lambda: fn(*args))

    def call_later(self, delay: float, fn: Any, *args: Any) -> None:
        self.later.append((delay, lambda: fn(*args)))

    def send(self, to: str, msg: Any) -> bool:
        self.sent.append((to, msg))
        return True

    send_threadsafe = send

    def run_soon(self) -> None:
        while self.soon:
            self.soon.pop(0)()

    def run_later(self) -> None:
        due, self.later = self.later, []
        for _, fn in due:
            fn()


class _Objects:
    def __init__(self) -> None:
        self.values: dict[bytes, m.Value] = {}

    def set_value(self, oid: bytes, value: m.Value) -> None:
        self.values[oid] = value

    def handle(self, event: Any) -> list[Any]:
        return []


class _Client:
    def __init__(self) -> None:
        self.loop = _Loop()
        self.objects = _Objects()
        self.address = "ipc://driver"
        self.node_address = "ipc://node"
        self.current_task_id = b""

    def send_direct(self, to: str, msg: Any) -> None:
        self.loop.sent.append((to, msg))


def _calls_to(client: _Client, address: str) -> list[Any]:
    return [msg for to, msg in client.loop.sent if to == address and isinstance(msg, m.ActorCall)]


def test_alive_news_in_the_death_grace_of_a_kill_sends_no_queued_call() -> None:
    """The race behind a flaky test_kill_of_an_actor_another_driver_made_on_another_node: a
    handle never called here is killed, a call is made at once (queued: the actor's address
    is not known yet), then the subscription's "alive" arrives while this caller's kill is
    still on its way to the actor's node. The call must fail with ActorDiedError, not run."""
    client = _Client()
    caller = ActorCaller(client)  # type: ignore[arg-type]
    rec = caller.track(AID, "Far")
    caller.kill_requested(AID, no_restart=True)
    caller.call(rec, "node", b"", [], [], 1, task_id=b"t" * 16)  # queued, not sent
    client.loop.run_soon()  # the kill's own death news: calls are open, so a grace starts
    caller._on_state("ipc://node", m.ActorState(actor_id=AID, state="alive",
                                                address="ipc://worker", restarts=0), [])
    assert _calls_to(client, "ipc://worker") == []
    assert [d for d, _ in client.loop.later] == [DEATH_GRACE_S]
    client.loop.run_later()
    (value,) = client.objects.values.values()
    err = values.decode(value, None)
    assert isinstance(err, ActorDiedError), err
    assert _calls_to(client, "ipc://worker") == []
