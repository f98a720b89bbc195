"""A user thread's sender while its endpoint closes from another thread.

ZeroMQ sockets are not thread-safe: closing one while another thread sends on it is
undefined behaviour in libzmq (an assertion abort or a crash, not an exception). The
endpoint's close closes every thread sender's sockets, so a thread sending at that instant
must never find a socket closed (or its endpoint's context gone) under it.
"""

from __future__ import annotations

import os
import threading

from zmesh.transports.zmq_transport import ZmqEndpoint


class _CloseMidSend(dict):  # type: ignore[type-arg]
    """A thread sender's socket table whose lookup (inside `send`) lets the endpoint's close
    start on another thread, then gives that close a second to finish: without the sender's
    lock it does, and the send goes on with a socket closed under it."""

    def __init__(self, peers: dict, endpoint: ZmqEndpoint) -> None:  # type: ignore[type-arg]
        super().__init__(peers)
        self.endpoint = endpoint
        self.closer: threading.Thread | None = None

    def get(self, key, default=None):  # type: ignore[no-untyped-def]
        if self.closer is None:
            self.closer = threading.Thread(target=self.endpoint.close)
            self.closer.start()
            self.closer.join(1.0)  # with the lock it cannot finish: the send holds it
        return super().get(key, default)


def test_a_send_under_way_finishes_before_the_endpoint_closes_its_socket(
        tmp_path: os.PathLike[str]) -> None:
    sink = ZmqEndpoint(f"ipc://{tmp_path}/sink.sock")
    source = ZmqEndpoint(f"ipc://{tmp_path}/source.sock")
    try:
        sender = source.thread_sender()
        sender.send(sink.address, [b"first"])
        assert sink.recv(10) is not None
        table = _CloseMidSend(sender._peers, source)
        sender._peers = table
        sender.send(sink.address, [b"second"])  # began before the close: it goes out
        got = sink.recv(10)
        assert got is not None and bytes(got[1][0]) == b"second"
        assert table.closer is not None
        table.closer.join(10)
        assert not table.closer.is_alive() and source.closed
    finally:
        source.close()
        sink.close()
