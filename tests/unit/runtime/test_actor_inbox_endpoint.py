"""`ActorInbox`: the endpoint a sync actor's executor thread receives its calls on.

It hands out actor calls only (anything else is dropped), in arrival order with the calls
the loop forwards, and `stop` ends `serve` and leaves no socket file behind."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from zmesh.protocol import codec
from zmesh.protocol.messages import runtime as m
from zmesh.runtime.worker.actor_inbox import INBOX_ENV, ActorInbox, SpareInbox, inbox_address
from zmesh.transports.zmq_transport import ZmqEndpoint

DEADLINE_S = 30.0


def _call(seq: int) -> m.ActorCall:
    return m.ActorCall(actor_id=b"a" * 16, caller="ipc:///caller", seq=seq,
                       task_id=bytes([seq]) * 16, method="noop", args=m.Args())


def test_the_inbox_binds_beside_the_worker() -> None:
    assert inbox_address("ipc:///s/worker-1-ab.sock") == "ipc:///s/worker-1-ab-calls.sock"
    assert inbox_address("tcp://10.0.0.2:4100") == "tcp://10.0.0.2:0"
    assert inbox_address("mem://worker") is None


def test_calls_are_served_in_order_and_anything_else_is_dropped(tmp_path: Path) -> None:
    worker = f"ipc://{tmp_path}/worker-1-ab.sock"
    inbox = ActorInbox.open_beside(worker)
    assert inbox is not None and inbox.address == f"ipc://{tmp_path}/worker-1-ab-calls.sock"
    caller = ZmqEndpoint(f"ipc://{tmp_path}/caller.sock")
    got: list[tuple[str, int]] = []
    done = threading.Event()

    def on_call(sender: str, call: m.ActorCall) -> None:
        got.append((sender, call.seq))
        if call.seq == 0:  # meanwhile the loop forwards one that came to it
            inbox.forward("loop-sender", _call(9))
        if len(got) == 4:
            done.set()

    server = threading.Thread(target=inbox.serve, args=(on_call,))
    server.start()
    try:
        caller.send(inbox.address, [codec.encode(_call(0))])
        caller.send(inbox.address, [codec.encode(m.Shutdown(reason="not a call"))])
        caller.send(inbox.address, [b"\xc1 not msgpack"])
        caller.send(inbox.address, [codec.encode(_call(1))])
        caller.send(inbox.address, [codec.encode(_call(2))])
        assert done.wait(DEADLINE_S)
        assert got == [(caller.address, 0), ("loop-sender", 9), (caller.address, 1),
                       (caller.address, 2)]
    finally:
        inbox.stop()
        server.join(DEADLINE_S)
        caller.close()
    assert not server.is_alive()
    assert not os.path.exists(inbox.address[len("ipc://"):])


def test_stop_removes_the_socket_file_while_a_call_runs(tmp_path: Path) -> None:
    inbox = ActorInbox.open_beside(f"ipc://{tmp_path}/worker-2-cd.sock")
    assert inbox is not None
    path = inbox.address[len("ipc://"):]
    assert os.path.exists(path)
    # nothing serves it (the executor thread is busy in a call): stop still cleans up
    inbox.stop()
    assert not os.path.exists(path)
    inbox.endpoint.close()


def test_turned_off_by_the_environment(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("ZMESH_ACTOR_INBOX", "0")
    assert ActorInbox.open_beside(f"ipc://{tmp_path}/worker-3-ef.sock") is None


class _FailingEndpoint:
    address = "ipc:///nowhere/worker-4-gh-calls.sock"

    def __init__(self) -> None:
        self.closed = False

    def recv(self, timeout: float | None) -> None:
        from zmesh.errors import TransportError

        raise TransportError("the socket broke")

    def wake(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def test_a_failed_endpoint_ends_serve_saying_why() -> None:
    endpoint = _FailingEndpoint()
    why = ActorInbox(endpoint).serve(lambda sender, call: None)
    assert "the socket broke" in why and endpoint.address in why
    assert endpoint.closed


def test_a_spare_is_claimed_once_and_an_unclaimed_one_leaves_no_socket_file(
        tmp_path: Path) -> None:
    worker = f"ipc://{tmp_path}/worker-1-ab.sock"
    path = tmp_path / "worker-1-ab-calls.sock"
    spare = SpareInbox(lambda: ActorInbox.open_beside(worker))
    spare.prepare()
    assert path.exists()
    inbox = spare.claim()
    assert inbox is not None and inbox.address == f"ipc://{path}"
    assert spare.claim() is None  # taken: no second one
    inbox.endpoint.close()
    assert not path.exists()

    unused = SpareInbox(lambda: ActorInbox.open_beside(worker))
    unused.prepare()
    unused.discard()  # the worker's first work was not a sync actor
    assert not path.exists() and unused.claim() is None


def test_a_spare_discarded_before_it_was_opened_is_never_opened(tmp_path: Path) -> None:
    opened: list[str] = []

    def open_() -> ActorInbox | None:
        opened.append("x")
        return ActorInbox.open_beside(f"ipc://{tmp_path}/worker-1-ab.sock")

    spare = SpareInbox(open_)
    spare.discard()  # the worker exits before its executor thread got to it
    spare.prepare()
    assert opened == [] and os.listdir(tmp_path) == []


def test_a_spare_is_closed_when_the_actors_environment_turns_inboxes_off(
        tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    spare = SpareInbox(lambda: ActorInbox.open_beside(f"ipc://{tmp_path}/worker-1-ab.sock"))
    spare.prepare()
    monkeypatch.setenv(INBOX_ENV, "0")  # runtime_env env_vars, applied after the spare opened
    assert spare.claim() is None
    assert os.listdir(tmp_path) == []
