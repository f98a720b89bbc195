"""What only the zmq transport does: real ports and socket files, restarts, queues, CURVE."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

import pytest
import transport_fixtures
from transport_fixtures import LeakCheck

from zmesh.errors import TransportError
from zmesh.security.keys import ClusterCredentials
from zmesh.transports import ZmqEndpoint, open_endpoint

ipc_dir = transport_fixtures.ipc_dir
no_transport_leaks = transport_fixtures.no_transport_leaks


@pytest.fixture
def closing(no_transport_leaks: LeakCheck, ipc_dir: str) -> Iterator[list[ZmqEndpoint]]:
    """Endpoints appended here are closed after the test, before the leak checks run."""
    endpoints: list[ZmqEndpoint] = []
    yield endpoints
    for endpoint in endpoints:
        endpoint.close()


def zmq_endpoint(closing: list[ZmqEndpoint], address: str, **options: object) -> ZmqEndpoint:
    endpoint = open_endpoint(address, **options)
    assert isinstance(endpoint, ZmqEndpoint)
    closing.append(endpoint)
    return endpoint


def test_tcp_port_zero_binds_a_free_port_and_reports_it(closing: list[ZmqEndpoint]) -> None:
    endpoint = zmq_endpoint(closing, "tcp://127.0.0.1:0")
    host, port = endpoint.address.removeprefix("tcp://").rsplit(":", 1)
    assert host == "127.0.0.1"
    assert int(port) > 0
    with socket.create_connection(("127.0.0.1", int(port)), timeout=5):
        pass


def test_tcp_port_in_use_is_refused_naming_the_address(closing: list[ZmqEndpoint]) -> None:
    first = zmq_endpoint(closing, "tcp://127.0.0.1:0")
    with pytest.raises(TransportError, match="cannot bind 'tcp://127.0.0.1:"):
        open_endpoint(first.address)


def test_close_removes_the_ipc_socket_file(closing: list[ZmqEndpoint], ipc_dir: str) -> None:
    path = os.path.join(ipc_dir, "node.sock")
    endpoint = zmq_endpoint(closing, f"ipc://{path}")
    assert os.path.exists(path)
    endpoint.close()
    assert not os.path.exists(path)


def test_ipc_path_served_by_a_live_endpoint_is_refused(
    closing: list[ZmqEndpoint], ipc_dir: str
) -> None:
    address = f"ipc://{ipc_dir}/taken"
    zmq_endpoint(closing, address)
    with pytest.raises(TransportError, match="another process is serving"):
        open_endpoint(address)


def test_stale_ipc_file_of_a_dead_process_is_replaced(
    closing: list[ZmqEndpoint], ipc_dir: str
) -> None:
    path = os.path.join(ipc_dir, "stale")
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(path)  # bound but never listening, as a crashed process leaves it
    dead.close()
    endpoint = zmq_endpoint(closing, f"ipc://{path}")
    sender = zmq_endpoint(closing, f"ipc://{ipc_dir}/sender")
    sender.send(endpoint.address, [b"hello"])
    assert endpoint.recv(timeout=10) == (sender.address, [b"hello"])


def test_ipc_path_that_is_a_regular_file_is_refused(
    closing: list[ZmqEndpoint], ipc_dir: str
) -> None:
    path = os.path.join(ipc_dir, "file")
    with open(path, "w") as f:
        f.write("not a socket")
    with pytest.raises(TransportError, match="not a socket"):
        open_endpoint(f"ipc://{path}")
    os.unlink(path)


def test_ipc_path_over_the_unix_limit_is_refused_with_its_length() -> None:
    long_path = "/tmp/" + "d" * 120 + "/sock"
    with pytest.raises(TransportError, match="over the 107-byte limit"):
        open_endpoint(f"ipc://{long_path}")


def test_restarted_peer_on_the_same_address_gets_the_next_messages(
    closing: list[ZmqEndpoint], ipc_dir: str
) -> None:
    server = zmq_endpoint(closing, f"ipc://{ipc_dir}/server")
    client = zmq_endpoint(closing, f"ipc://{ipc_dir}/client")
    client.send(server.address, [b"1"])
    assert server.recv(timeout=10) == (client.address, [b"1"])
    # The client "restarts": same address, new process state, new connection.
    client.close()
    client = zmq_endpoint(closing, f"ipc://{ipc_dir}/client")
    client.send(server.address, [b"2"])
    assert server.recv(timeout=10) == (client.address, [b"2"])
    server.send(client.address, [b"back"])
    assert client.recv(timeout=10) == (server.address, [b"back"])


def test_full_send_queue_raises_instead_of_blocking(
    closing: list[ZmqEndpoint], ipc_dir: str
) -> None:
    sender = zmq_endpoint(closing, f"ipc://{ipc_dir}/s", sndhwm=10, linger=0)
    with pytest.raises(TransportError, match="send queue .* is full"):
        for _ in range(10_000):  # nobody is bound there, so nothing drains the queue
            sender.send(f"ipc://{ipc_dir}/nobody", [b"x"])


def test_frames_at_or_over_64_kib_are_received_zero_copy(
    closing: list[ZmqEndpoint], ipc_dir: str
) -> None:
    a = zmq_endpoint(closing, f"ipc://{ipc_dir}/a")
    b = zmq_endpoint(closing, f"ipc://{ipc_dir}/b")
    a.send(b.address, [b"small", b"s" * (64 * 1024 - 1), b"L" * (64 * 1024)])
    message = b.recv(timeout=10)
    assert message is not None
    small, under, large = message[1]
    assert type(small) is bytes and type(under) is bytes
    assert isinstance(large, memoryview) and large.nbytes == 64 * 1024


def test_closing_the_last_endpoint_terminates_the_shared_context(
    no_transport_leaks: LeakCheck, ipc_dir: str
) -> None:
    a = open_endpoint(f"ipc://{ipc_dir}/a")
    b = open_endpoint("inproc://ctx-b")
    a.send("inproc://ctx-b", [b"x"])  # inproc works only because the context is shared
    assert b.recv(timeout=10) == (a.address, [b"x"])
    a.close()
    b.close()
    no_transport_leaks.verify()  # libzmq's I/O and reaper threads are gone, and their fds


def test_advertise_overrides_the_address_peers_see(closing: list[ZmqEndpoint]) -> None:
    server = zmq_endpoint(closing, "tcp://127.0.0.1:0")
    public = zmq_endpoint(closing, "tcp://127.0.0.1:0", advertise="tcp://node-7.example:7000")
    assert public.address == "tcp://node-7.example:7000"
    public.send(server.address, [b"x"])
    assert server.recv(timeout=10) == ("tcp://node-7.example:7000", [b"x"])


def test_tcp_is_curve_and_admits_only_holders_of_the_cluster_key(
        closing: list[ZmqEndpoint]) -> None:
    mesh, other = ClusterCredentials.generate(), ClusterCredentials.generate()
    server = zmq_endpoint(closing, "tcp://127.0.0.1:0", credentials=mesh)
    member = zmq_endpoint(closing, "tcp://127.0.0.1:0", credentials=mesh)
    stranger = zmq_endpoint(closing, "tcp://127.0.0.1:0", credentials=other)
    plain = zmq_endpoint(closing, "tcp://127.0.0.1:0", insecure=True)
    stranger.send(server.address, [b"wrong key"])
    plain.send(server.address, [b"plain text"])  # no CURVE: the handshake fails
    member.send(server.address, [b"encrypted"])
    assert server.recv(timeout=10) == (member.address, [b"encrypted"])
    assert server.recv(timeout=0.3) is None


def test_credentials_and_insecure_are_exclusive() -> None:
    with pytest.raises(TransportError, match="not both"):
        open_endpoint("tcp://127.0.0.1:0", insecure=True,
                      credentials=ClusterCredentials.generate())


def test_binding_a_non_zmq_scheme_directly_is_refused() -> None:
    with pytest.raises(TransportError, match="use tcp://, ipc:// or inproc://"):
        ZmqEndpoint("mem://x")


def test_io_threads_come_from_the_environment_and_bad_values_are_named(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from zmesh.transports.zmq_context import IO_THREADS_ENV, io_threads

    monkeypatch.delenv(IO_THREADS_ENV, raising=False)
    assert io_threads() == 1
    monkeypatch.setenv(IO_THREADS_ENV, "3")
    assert io_threads() == 3
    for bad in ("two", "0", "65"):
        monkeypatch.setenv(IO_THREADS_ENV, bad)
        with pytest.raises(TransportError, match=IO_THREADS_ENV):
            io_threads()
