"""The client's object table under the garbage collector: a ref's finalizer may run anywhere."""

from __future__ import annotations

import gc
import threading

from zmesh.object_ref import ObjectRef
from zmesh.runtime.owner.objects import ObjectTable


class _Client:
    """Just what ObjectRef needs: an object table and a `closed` flag."""

    def __init__(self) -> None:
        self.freed: list[bytes] = []
        self.objects = ObjectTable("me", lambda fn, *a: fn(*a), self._on_free)
        self.closed = False

    def _on_free(self, object_id: bytes, entry: object) -> None:
        self.freed.append(object_id)


def test_a_ref_collected_while_the_table_is_locked_does_not_deadlock(monkeypatch):
    client = _Client()
    doomed = ObjectRef(b"a" * 20, "me", client)
    cycle: list[object] = [doomed]
    cycle.append(cycle)  # only the cycle collector can free it now
    del doomed, cycle
    core = client.objects.core
    real_add_local = core.add_local

    def collecting_add_local(object_id: bytes, owner: str) -> object:
        record = real_add_local(object_id, owner)  # (made under the table's lock)
        gc.collect()  # as an allocation inside incref may: runs the doomed ref's __del__
        return record

    monkeypatch.setattr(core, "add_local", collecting_add_local)
    done = threading.Event()

    def make_ref() -> None:
        ObjectRef(b"b" * 20, "me", client)  # incref under the lock -> gc -> decref
        done.set()

    gc.disable()
    try:
        threading.Thread(target=make_ref, daemon=True).start()
        assert done.wait(10), "incref deadlocked on a decref run by the garbage collector"
    finally:
        gc.enable()
    assert b"a" * 20 in client.freed
