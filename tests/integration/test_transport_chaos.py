"""Chaos over a real socket: the fates depend on the seed and the sends, not the transport."""

from __future__ import annotations

import transport_fixtures
from transport_fixtures import LeakCheck

from zmesh.transports import ChaosEndpoint, MemoryNetwork, open_endpoint

ipc_dir = transport_fixtures.ipc_dir
no_transport_leaks = transport_fixtures.no_transport_leaks
FAULTS = {"drop": 0.2, "duplicate": 0.2, "reorder": 0.2}


def deliver(sender: ChaosEndpoint, receiver_address: str, count: int) -> None:
    for i in range(count):
        sender.send(receiver_address, [i.to_bytes(4, "big")])
    sender.flush()


def test_seeded_faults_hit_the_same_messages_over_ipc_as_in_memory(
    no_transport_leaks: LeakCheck, ipc_dir: str
) -> None:
    network = MemoryNetwork()
    memory_sender = ChaosEndpoint(network.open("mem://s"), 11, hold=60.0, **FAULTS)
    memory_receiver = network.open("mem://r")
    ipc_sender = ChaosEndpoint(open_endpoint(f"ipc://{ipc_dir}/s"), 11, hold=60.0, **FAULTS)
    ipc_receiver = open_endpoint(f"ipc://{ipc_dir}/r")
    try:
        deliver(memory_sender, memory_receiver.address, 500)
        deliver(ipc_sender, ipc_receiver.address, 500)
        expected = []
        while (message := memory_receiver.recv(timeout=0)) is not None:
            expected.append(bytes(message[1][0]))
        got = []
        while len(got) < len(expected):
            message = ipc_receiver.recv(timeout=10)
            assert message is not None, f"got {len(got)} of {len(expected)} over ipc"
            got.append(bytes(message[1][0]))
        assert got == expected
        assert ipc_receiver.recv(timeout=0.1) is None
        assert ipc_sender.stats == memory_sender.stats
    finally:
        ipc_sender.close()
        ipc_receiver.close()
        network.close()
