"""A descriptor's anchor ref: pickled as the ref it is (the value that holds it counts as
holding the ref, so the producer keeps the tensors), unpickled as its bare id (reading a
descriptor makes no live ref: no incref, decref or message to the producer per transfer)."""

from __future__ import annotations

import pickle

from zmesh.object_ref import ObjectRef
from zmesh.runtime import context
from zmesh.tensor_transport.value import _Anchor


class _Objects:
    def __init__(self) -> None:
        self.counts: dict[bytes, int] = {}

    def incref(self, object_id: bytes, owner: str) -> None:
        self.counts[object_id] = self.counts.get(object_id, 0) + 1

    def decref(self, object_id: bytes) -> None:
        self.counts[object_id] -= 1


class _Client:
    closed = False

    def __init__(self) -> None:
        self.objects = _Objects()


def test_the_anchor_counts_as_held_when_pickled_and_is_a_bare_id_when_read():
    client = _Client()
    ref = ObjectRef(b"\x01" * 20, "ipc://producer", client)
    with context.RefCollector() as held:
        data = pickle.dumps({"anchor": _Anchor(ref)})
    assert held.refs == [ref]  # the stored value holds the producer's ref
    with context.RefCollector() as read:
        state = pickle.loads(data)
    assert state["anchor"] == (b"\x01" * 20, "ipc://producer")
    assert read.refs == [] and client.objects.counts == {ref.id: 1}  # only the original
