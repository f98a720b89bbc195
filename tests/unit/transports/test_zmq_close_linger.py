"""Closing an endpoint lingers to flush what it queued, except towards an ipc peer whose
socket file is gone (it closed first: nothing can reach it, so waiting would only delay)."""

from __future__ import annotations

import socket

from zmesh.transports.zmq_transport import _ipc_peer_gone


def test_an_ipc_peer_is_gone_only_when_its_socket_file_is(tmp_path) -> None:
    path = tmp_path / "peer.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    try:
        assert not _ipc_peer_gone(f"ipc://{path}")
    finally:
        listener.close()
    path.unlink()
    assert _ipc_peer_gone(f"ipc://{path}")
    # what it cannot tell stays lingered for: other schemes, abstract ipc names
    assert not _ipc_peer_gone("tcp://127.0.0.1:5555")
    assert not _ipc_peer_gone("ipc://@zmesh-abstract")
    assert not _ipc_peer_gone("inproc://zmesh")
