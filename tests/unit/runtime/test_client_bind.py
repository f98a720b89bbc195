"""A client that talks to a node over tcp binds where that node can answer it.

A process is named by the address it receives at, and a node answers it there (and first
asks there who receives: the proof of address). A driver (`zmesh.init(address=...)`) or a
`zmesh status --address` that talks to a node on another machine bound 127.0.0.1, which on
the node's machine is the node's own loopback: none of its messages could be proven, and no
answer could reach it, so the README's multi-machine driver and status did not work. They
bind the interface their traffic to the node leaves by; a node on loopback keeps 127.0.0.1.
(One machine cannot show the failure itself; this checks the address each binds.)"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from zmesh.errors import ZmeshError
from zmesh.runtime.addresses import LOOPBACK_BIND, bind_to_reach
from zmesh.runtime.node.query import NodeQuerier
from zmesh.security.keys import ClusterCredentials


@pytest.fixture
def this_machine() -> Iterator[str]:
    """An IPv4 address of this machine other than loopback (its outbound one)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("10.255.255.255", 9))  # UDP: nothing is sent
            ip = str(probe.getsockname()[0])
    except OSError:
        pytest.skip("this machine has no route off loopback")
    if ip.startswith("127."):
        pytest.skip("this machine has no address off loopback")
    yield ip


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_node_on_loopback_keeps_the_client_on_loopback() -> None:
    for address in ("tcp://127.0.0.1:7700", "localhost:7700", "ipc:///tmp/zmesh/node.sock"):
        assert bind_to_reach(address) == LOOPBACK_BIND


def test_a_driver_of_a_node_on_a_real_interface_binds_that_interface(this_machine: str) -> None:
    from zmesh.runtime.owner.client import CoreClient

    client = CoreClient(f"tcp://{this_machine}:{_free_port()}", "", "driver")
    try:
        assert client.address.startswith(f"tcp://{this_machine}:"), client.address
    finally:
        client.close()


def test_a_status_query_of_a_node_on_a_real_interface_binds_that_interface(
        this_machine: str) -> None:
    with NodeQuerier(credentials=ClusterCredentials.generate()) as querier:
        with pytest.raises(ZmeshError):  # nobody there: only the bind is looked at
            querier.query(f"{this_machine}:{_free_port()}", "node", timeout=0.2)
        assert querier.endpoint.address.startswith(f"tcp://{this_machine}:")


def test_a_node_asked_to_bind_any_address_binds_this_machines_own() -> None:
    from zmesh.runtime.addresses import host_to_bind

    assert host_to_bind("127.0.0.1") == "127.0.0.1"
    assert host_to_bind("10.1.2.3") == "10.1.2.3"  # (named hosts are kept as given)
    try:
        chosen = host_to_bind("0.0.0.0")
    except ValueError as exc:  # a machine with loopback only: said clearly
        assert "pass it with --host" in str(exc)
        return
    assert chosen not in ("0.0.0.0", "") and not chosen.startswith("127.")
