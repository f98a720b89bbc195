"""A call that `retry_exceptions` sent again takes no answer of its earlier attempt, and
its retries are one budget with the restarts that sent it again (as Ray's max_task_retries).

The call keeps its id when it goes again, so an answer of the first attempt that comes late
(a copy the worker sent again for a repeat of the first attempt, or one delayed on the way)
was taken for the second attempt's: the call failed with the first attempt's exception while
the second still ran (or, with retries left, ran a third time beside it). Each attempt is
numbered in the ActorCall, the worker answers with that number, and the caller takes only
the answer of the attempt in flight. The shell is driven by hand (its loop and client are
stand-ins) so that the late copy comes exactly then."""

from __future__ import annotations

from typing import Any

from zmesh.protocol.messages import runtime as m
from zmesh.runtime import values
from zmesh.runtime.owner.actor_calls import ActorCaller

AID = b"a" * 16
TID = b"t" * 16
WORKER = "ipc://worker"


class _Loop:
    def __init__(self) -> None:
        self.soon: list[Any] = []
        self.sent: list[tuple[str, Any]] = []

    def clock(self) -> float:
        return 0.0

    def call_soon(self, fn: Any, *args: Any) -> None:
        self.soon.append(lambda: fn(*args))

    def call_later(self, delay: float, fn: Any, *args: Any) -> None:
        pass  # (the resend sweep: not part of this story)

    def send(self, to: str, msg: Any) -> bool:
        self.sent.append((to, msg))
        return True

    send_threadsafe = send


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


def _calls(client: _Client) -> list[m.ActorCall]:
    return [msg for to, msg in client.loop.sent if to == WORKER and isinstance(msg, m.ActorCall)]


def _answer(value: Any, attempt: int, error: bool = False) -> m.TaskResult:
    v = values.encode_error(value) if error else values.encode(value, TID, allocate=None,
                                                                 seal=None)[0]
    return m.TaskResult(task_id=TID, returns=[v], attempt=attempt)


def test_a_late_answer_of_the_first_attempt_is_not_taken_for_the_retrys() -> None:
    client = _Client()
    caller = ActorCaller(client)  # type: ignore[arg-type]
    rec = caller.track(AID, "Flaky")
    caller._on_state("ipc://node", m.ActorState(actor_id=AID, state="alive", address=WORKER,
                                                restarts=0), [])
    caller.call(rec, "work", b"", [], [], 1, task_id=TID, retries=1, retry_exceptions=True)
    first = _answer(ValueError("first attempt"), attempt=_calls(client)[0].attempt, error=True)
    caller.on_result(WORKER, first)  # covered: the call goes again
    while client.loop.soon:
        client.loop.soon.pop(0)()
    sent = _calls(client)
    assert len(sent) == 2 and sent[1].attempt != sent[0].attempt
    caller.on_result(WORKER, first)  # the first attempt's answer again, late
    while client.loop.soon:
        client.loop.soon.pop(0)()
    assert client.objects.values == {}, "a late answer of the first attempt completed the call"
    assert len(_calls(client)) == 2  # and it did not send the call a third time
    caller.on_result(WORKER, _answer(7, attempt=sent[1].attempt))
    (value,) = client.objects.values.values()
    assert values.decode(value, None) == 7


def test_a_restart_that_sent_the_call_again_spent_the_retry_an_exception_would_take() -> None:
    """max_task_retries=1: the first attempt's worker dies and the restarted actor runs the
    call again (the one retry); its covered exception then is the answer. (The shell counted
    the exception's retries from the actor's max_task_retries, not from what the restart
    left: the call ran a third time.)"""
    client = _Client()
    caller = ActorCaller(client)  # type: ignore[arg-type]
    rec = caller.track(AID, "Flaky", max_task_retries=1)
    caller._on_state("ipc://node", m.ActorState(actor_id=AID, state="alive", address=WORKER,
                                                restarts=0), [])
    caller.call(rec, "work", b"", [], [], 1, task_id=TID, retry_exceptions=True)
    caller._on_state("ipc://node", m.ActorState(actor_id=AID, state="restarting"), [])
    caller._on_state("ipc://node", m.ActorState(actor_id=AID, state="alive", address=WORKER,
                                                restarts=1), [])
    while client.loop.soon:
        client.loop.soon.pop(0)()
    sent = _calls(client)
    assert len(sent) == 2  # sent again to the restarted actor: the retry is spent
    caller.on_result(WORKER, _answer(ValueError("covered"), attempt=sent[1].attempt,
                                     error=True))
    while client.loop.soon:
        client.loop.soon.pop(0)()
    assert len(_calls(client)) == 2, "the exception sent the call a third time"
    (value,) = client.objects.values.values()
    assert value.is_error
