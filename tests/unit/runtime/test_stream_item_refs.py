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

    def encode(self, obj: Any, oid: bytes) -> tuple[Any, list[Ref]]:
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
