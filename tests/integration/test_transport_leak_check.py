"""The leak check itself must catch what it claims to: open endpoints, fds and ipc files."""

from __future__ import annotations

import os
import socket

import pytest
import transport_fixtures
import zmq
from transport_fixtures import LeakCheck, TransportLeak, private_ipc_dir

from zmesh.transports import live_endpoints, open_endpoint

# Shared transport fixtures, requested by name below.
ipc_dir = transport_fixtures.ipc_dir


def test_an_endpoint_left_open_is_reported_and_closed(ipc_dir: str) -> None:
    check = LeakCheck()
    endpoint = open_endpoint(f"ipc://{ipc_dir}/left-open")
    with pytest.raises(TransportLeak, match="left-open"):
        check.verify()
    assert endpoint.closed
    assert endpoint not in live_endpoints()
    check.verify()


def test_a_zmq_context_left_alive_is_reported() -> None:
    check = LeakCheck()
    context = zmq.Context()
    sock = context.socket(zmq.PULL)
    try:
        with pytest.raises(TransportLeak, match="file descriptors"):
            check.verify()
    finally:
        sock.close(linger=0)
        context.term()
    check.verify()


def test_closing_every_endpoint_releases_every_fd_and_thread(ipc_dir: str) -> None:
    check = LeakCheck()
    a = open_endpoint(f"ipc://{ipc_dir}/a")
    b = open_endpoint("tcp://127.0.0.1:0")
    a.send(b.address, [b"x" * 200_000])  # zero-copy path, pyzmq's gc thread included
    assert b.recv(timeout=10) is not None
    b.send(a.address, [b"y"])
    assert a.recv(timeout=10) is not None
    a.close()
    b.close()
    check.verify()
    assert os.listdir(ipc_dir) == []


def test_ipc_dir_fails_when_a_socket_file_is_left() -> None:
    with pytest.raises(TransportLeak, match="stray"), private_ipc_dir() as path:
        stray = socket.socket(socket.AF_UNIX)
        stray.bind(os.path.join(path, "stray"))
        stray.close()
    assert not os.path.exists(path)
