"""What only the in-memory network does: its own namespace, detectable unroutable peers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import transport_fixtures
from transport_fixtures import LeakCheck

from zmesh.errors import TransportError
from zmesh.transports import MemoryNetwork, live_endpoints, open_endpoint

no_transport_leaks = transport_fixtures.no_transport_leaks


@pytest.fixture
def network(no_transport_leaks: LeakCheck) -> Iterator[MemoryNetwork]:
    net = MemoryNetwork()
    yield net
    net.close()


def test_sending_to_an_unbound_name_raises(network: MemoryNetwork) -> None:
    a = network.open("mem://a")
    with pytest.raises(TransportError, match="no memory endpoint is bound at 'mem://ghost'"):
        a.send("mem://ghost", [b"x"])


def test_a_closed_peer_becomes_unroutable(network: MemoryNetwork) -> None:
    a, b = network.open("mem://a"), network.open("mem://b")
    b.close()
    with pytest.raises(TransportError, match="mem://b"):
        a.send("mem://b", [b"x"])
    assert network.addresses() == ["mem://a"]


def test_networks_are_separate_namespaces(network: MemoryNetwork) -> None:
    other = MemoryNetwork()
    a = network.open("mem://same")
    b = other.open("mem://same")
    try:
        a.send("mem://same", [b"to myself"])
        assert a.recv(timeout=0) == ("mem://same", [b"to myself"])
        assert b.recv(timeout=0) is None
    finally:
        other.close()


def test_binding_a_taken_name_is_refused(network: MemoryNetwork) -> None:
    network.open("mem://a")
    with pytest.raises(TransportError, match="already bound"):
        network.open("mem://a")
    with pytest.raises(TransportError, match="must look like 'mem://name'"):
        network.open("mem://")


def test_receiver_gets_a_snapshot_not_the_senders_buffer(network: MemoryNetwork) -> None:
    a, b = network.open("mem://a"), network.open("mem://b")
    data = bytearray(b"before")
    a.send("mem://b", [data])
    data[:] = b"after!"
    assert b.recv(timeout=0) == ("mem://a", [b"before"])


def test_registry_uses_the_default_network_without_network_option() -> None:
    endpoint = open_endpoint("mem://registry-default")
    try:
        assert "mem://registry-default" in MemoryNetwork.default().addresses()
        assert endpoint in live_endpoints()
    finally:
        endpoint.close()
    assert endpoint not in live_endpoints()
