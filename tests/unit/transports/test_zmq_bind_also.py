"""A zmq endpoint bound at a second address: a node's tcp port beside its ipc socket."""

from __future__ import annotations

import os

import pytest

from zmesh.errors import TransportError
from zmesh.transports.zmq_transport import ZmqEndpoint


def test_messages_to_the_second_address_arrive_and_replies_go_back(tmp_path: os.PathLike[str]) -> None:
    node = ZmqEndpoint("tcp://127.0.0.1:0")
    ipc = node.bind_also(f"ipc://{tmp_path}/node.sock")
    client = ZmqEndpoint(f"ipc://{tmp_path}/client.sock")
    try:
        assert ipc.startswith("ipc://") and node.address.startswith("tcp://")
        client.send(ipc, [b"hello"])
        got = node.recv(5.0)
        assert got is not None and got[0] == client.address and bytes(got[1][0]) == b"hello"
        node.send(client.address, [b"back"])
        reply = client.recv(5.0)
        assert reply is not None and reply[0] == node.address
    finally:
        client.close()
        node.close()
    assert not os.path.exists(f"{tmp_path}/node.sock")


def test_bind_also_refuses_inproc_and_closed_endpoints() -> None:
    ep = ZmqEndpoint("tcp://127.0.0.1:0")
    with pytest.raises(TransportError, match="tcp:// or ipc://"):
        ep.bind_also("inproc://x")
    ep.close()
    with pytest.raises(TransportError, match="closed"):
        ep.bind_also("tcp://127.0.0.1:0")
