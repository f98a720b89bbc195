"""A streaming generator's items and the refs inside them go in the same message: the refs
an item lends (or lets the owner borrow) are listed with that item, whatever thread flushes
the buffer meanwhile (the loop's batching timer runs beside the generator's thread). Listed
with an earlier item's message, the owner holds them under the wrong item, or refuses them
because their item has not come yet, and the object can be freed under a live ref."""

from __future__ import annotations

import sys
import threading
from collections import namedtuple
from typing import Any

from zmesh.protocol.messages import runtime as m
from zmesh.runtime.worker import streaming

Ref = namedtuple("Ref", "id owner")
ME, OWNER = "ipc://worker", "ipc://owner"


class _Client:
    """Just what a stream's sender uses: every message it sends is recorded."""

    address = ME

    def __init__(self) -> None:
        self.sent: list[Any] = []
        self.lock = threading.Lock()
        client = self

        class _Loop:
            def call_soon(self, *args: Any) -> None:
                pass  # the test's own thread plays the batching timer

            call_later = call_soon

            def send(self, to: str, msg: Any) -> None:
                client.record(msg)

        class _Quiet:
            def add_borrower(self, *args: Any) -> None:
                pass

            def lend(self, *args: Any, **kwargs: Any) -> None:
                pass

        self.loop = _Loop()
        self.objects = self.lending = _Quiet()

    def record(self, msg: Any) -> None:
        with self.lock:
            self.sent.append(msg)

    def send_direct(self, to: str, msg: Any) -> None:
        self.record(msg)

    def encode(self, obj: Any, oid: bytes, for_owner: str = "") -> tuple[Any, list[Ref]]:
        n = obj  # item n holds a ref of another process's and one of ours
        return n, [Ref(b"theirs-%d" % n, "ipc://third"), Ref(b"ours-%d" % n, ME)]


def test_refs_inside_an_item_go_in_the_message_that_carries_the_item() -> None:
    client = _Client()
    sender = streaming._Sender(client, b"t" * 20, OWNER)
    items = 15000
    done = threading.Event()

    def timer() -> None:  # the loop thread's batching timer, as often as it can
        while not done.is_set():
            sender.flush(on_loop=True)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often: the window is a few bytecodes
    flusher = threading.Thread(target=timer)
    flusher.start()
    try:
        for n in range(items):
            sender.item(n)
    finally:
        done.set()
        flusher.join(60)
        sys.setswitchinterval(old)
    sender.flush()
    seen = 0
    for msg in client.sent:
        if isinstance(msg, m.GeneratorItem):
            start, values = msg.index, [msg.value]
        else:
            start, values = msg.start, msg.values
        carried = set(values)
        assert {int(x.object_id.split(b"-")[1]) for x in msg.lent} <= carried, msg
        assert {x.index for x in msg.lent} <= set(range(start + 1, start + len(values) + 1))
        assert {int(oid.split(b"-")[1]) for oid in msg.contained} <= carried, msg
        seen += len(values)
    assert seen == items


def test_refs_inside_an_item_are_taken_over_before_a_user_thread_can_read_it() -> None:
    """The owner's side: the refs an item carries are taken over (held while the item
    lives) before the item is handed out. Before, a waiting user thread was woken first: if
    it read the item (the value read holds a ref to the object inside) and dropped the item
    before the loop thread took the refs over, they were refused, and the object's owner
    freed it under the ref the value read made (here the waiter's callback plays that
    thread, winning the race every time)."""
    from zmesh import generators
    from zmesh.object_ref import ObjectRef
    from zmesh.runtime.ids import IdGen
    from zmesh.runtime.owner.client import CoreClient
    from zmesh.runtime.owner.lending import Lending
    from zmesh.runtime.owner.objects import ObjectTable

    third, worker = "ipc://third", "ipc://worker"

    class _Owner:
        address = OWNER
        closed = False
        node_address = "ipc://node"
        hold_returned = CoreClient.hold_returned

        def __init__(self) -> None:
            self.sent: list[Any] = []
            client = self

            class _Loop:
                def on(self, *args: Any) -> None:
                    pass

                def send(self, to: str, msg: Any) -> bool:
                    client.sent.append(msg)
                    return True

                def send_threadsafe(self, to: str, msg: Any) -> None:
                    client.sent.append(msg)

                def call_soon(self, fn: Any, *args: Any) -> None:
                    fn(*args)

            self.loop = _Loop()
            self.objects = ObjectTable(OWNER, lambda fn, *args: fn(*args), lambda *a: None)
            self.lending = Lending(self)

    client = _Owner()
    task = b"g" * 20
    completion = ObjectRef(IdGen.object_id(task, 0), OWNER, client)
    stream = generators.open_stream(client, task, completion, 0, False)
    read: list[Any] = []

    def read_and_drop(_: Any) -> None:  # a user thread woken by the item's arrival
        ref = stream.take()
        assert ref is not None
        read.append(ObjectRef(b"x" * 24, third, client))  # what the item's value holds
        del ref  # the item itself is dropped at once

    stream.waiter().add_done_callback(read_and_drop)
    msg = m.GeneratorItem(task_id=task, index=0, value=m.Value(data=b"v"), worker=worker,
                          lent=[m.Lent(index=1, object_id=b"x" * 24, owner=third)])
    generators._on_items(client, worker, task, 0, [msg.value], msg)
    assert read, "the waiter was not woken"
    hand_offs = [x for x in client.sent if isinstance(x, m.HandOffBorrow)]
    assert hand_offs and all(x.take for x in hand_offs), hand_offs
    client.objects.core.validate()
