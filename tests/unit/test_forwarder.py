"""The node's forwarder alone: where a repeated ForwardLease goes when the node it was passed
on to died (chaos seed 71: it was followed to the dead node forever and the owner hung)."""

from __future__ import annotations

from typing import Any

from zmesh.core import node_lease_events as nl
from zmesh.protocol.messages import placement as p
from zmesh.protocol.messages import runtime as m
from zmesh.runtime.node.forward import Forwarder, ForwardPorts


class Ports:
    def __init__(self) -> None:
        self.sent: list[tuple[str, Any]] = []
        self.events: list[nl.Event] = []
        self.requests: list[bytes] = []

    def ports(self) -> ForwardPorts:
        return ForwardPorts(
            send=lambda to, msg: self.sent.append((to, msg)),
            on=lambda cls, handler: None,
            own_address="tcp://n2",
            live_address=lambda node_id: None,
            function_blob=lambda fn: b"",
            actor_entry=lambda actor_id: None,
            schedule_actor=lambda entry: None,
            host_actor=lambda *a, **k: None,
            lease_request=lambda lease_id, request, **k: self.requests.append(lease_id),
            lease_event=self.events.append,
            actors_node_gone=lambda *a: None,
            groups_node_gone=lambda *a: None,
        )


def _forward(hops: int = 1) -> p.ForwardLease:
    return p.ForwardLease(lease_id=b"L1", origin="tcp://n0", hops=hops, request=m.RequestLease(
        request_id=9, owner="ipc://driver", resources={"CPU": 1.0}, name="total"))


def test_a_repeat_of_a_lease_passed_on_follows_it_while_its_node_lives():
    io = Ports()
    fw = Forwarder(io.ports())
    fw._on_forward_lease("tcp://n0", _forward(), [])
    assert io.requests == [b"L1"]
    fw.note_passed_on(b"L1", "tcp://n1")  # our scheduler sent it on to n1
    fw._on_forward_lease("tcp://n0", _forward(), [])  # the origin heard nothing: again
    assert io.sent == [("tcp://n1", _forward())]
    assert io.events == []


def test_a_repeat_of_a_lease_passed_on_to_a_dead_node_is_answered_here():
    io = Ports()
    fw = Forwarder(io.ports())
    fw._on_forward_lease("tcp://n0", _forward(), [])
    fw.note_passed_on(b"L1", "tcp://n1")
    fw.note_passed_on(b"L2", "tcp://n3")
    fw.node_gone("n1", "tcp://n1", "died")
    assert [e for e in io.events if isinstance(e, nl.PeerDied)] == [
        nl.PeerDied("tcp://n1", "n1", "died")]
    io.events.clear()
    fw._on_forward_lease("tcp://n0", _forward(), [])
    # Not sent to the dead node (it never answers): the lease core says we have no record,
    # so the origin places the request again.
    assert io.sent == []
    assert io.events == [nl.ForwardRepeated(b"L1", "tcp://n0")]
    assert dict(fw.passed_on) == {b"L2": "tcp://n3"}
