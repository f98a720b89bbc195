"""Operations messages: what workers report to their node for `zmesh timeline`."""

from __future__ import annotations

import msgspec

from zmesh.protocol.messages.base import Message


class TaskEvent(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """One task or actor call a worker ran: when it started and ended (epoch seconds)."""

    task_id: bytes
    name: str
    kind: str  # "task", "actor_call" or "actor_create"
    start: float
    end: float
    ok: bool = True
    error: str = ""  # the exception, when not ok: `ValueError: bad input`


class TaskEvents(Message, tag=200):
    """A batch of finished tasks from one worker; its node keeps the recent ones. `running`:
    what the worker runs now (their `end` is 0), replacing what it said before."""

    pid: int
    events: list[TaskEvent] = []
    running: list[TaskEvent] = []


class UserMetrics(Message, tag=201):
    """The current values of the metrics a worker's user code defined (zmesh.util.metrics),
    msgpack-encoded records; its node keeps the latest per worker."""

    pid: int
    records: bytes = b""
