"""A driver (or joining node) that says Hello to a zmesh process of another wire protocol
version fails at once with an error naming both versions.

Before, the other process's transport dropped the probe's Hello (it refuses a connection of
another version, with a warning in its own log only) and the driver waited for its timeout,
then said that no node answered. The fake peers here are this version's transport with the
version it checks for patched: a process of another version running this code.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import zmq

import zmesh
from zmesh.errors import HandshakeError, ZmeshError
from zmesh.protocol.handshake import PROTOCOL_VERSION
from zmesh.security import keys
from zmesh.security.keys import ClusterCredentials
from zmesh.security.probe import handshake
from zmesh.transports import open_endpoint, zmq_peers
from zmesh.transports.zmq_transport import ZmqEndpoint

OTHER = "999"


@pytest.fixture
def other_version_node(creds: ClusterCredentials,
                       monkeypatch: pytest.MonkeyPatch) -> Iterator[ZmqEndpoint]:
    """A tcp endpoint of the mesh `creds` that speaks wire protocol OTHER, receiving in a
    thread of its own (refusals happen as it receives)."""
    monkeypatch.setattr(zmq_peers, "_PROTO", OTHER)
    stop = threading.Event()
    with open_endpoint("tcp://127.0.0.1:0", credentials=creds) as server:
        assert isinstance(server, ZmqEndpoint)

        def serve() -> None:
            while not stop.is_set():
                server.recv(0.05)

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        try:
            yield server
        finally:
            stop.set()
            thread.join(10)


def _names_both(text: str) -> bool:
    return f"expected {OTHER}, got {PROTOCOL_VERSION}" in text and \
        f"wire protocol {OTHER}" in text


def test_a_probe_to_a_node_of_another_version_is_refused_naming_both_versions(
        creds: ClusterCredentials, other_version_node: ZmqEndpoint) -> None:
    # (timeout 60: before, this waited the whole minute and raised ZmeshError "no answer")
    with pytest.raises(HandshakeError) as info:
        handshake(other_version_node.address, creds, role="driver", timeout=60)
    assert _names_both(str(info.value)), info.value
    assert other_version_node.peers.refused_version == 1


def test_init_against_a_node_of_another_version_fails_naming_both_versions(
        creds: ClusterCredentials, other_version_node: ZmqEndpoint,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(keys, "_installed", keys._installed)  # init installs the token
    with pytest.raises(HandshakeError) as info:
        zmesh.init(address=other_version_node.address, token=creds.token)
    assert _names_both(str(info.value)), info.value
    assert not zmesh.is_initialized()


def test_a_node_that_takes_the_connection_but_never_answers_may_be_another_version(
        tmp_path: object) -> None:
    # A process of an older version drops our Hello without a word: the probe can only say
    # what it saw (the connection was taken, no answer came) and what that may mean.
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.linger = 0
    try:
        router.bind(f"ipc://{tmp_path}/silent.sock")
        with pytest.raises(ZmeshError) as info:
            handshake(f"ipc://{tmp_path}/silent.sock", None, role="driver", timeout=0.5)
        assert "may run another zmesh version" in str(info.value), info.value
        assert f"wire protocol {PROTOCOL_VERSION}" in str(info.value)
    finally:
        router.close(linger=0)
        ctx.term()
