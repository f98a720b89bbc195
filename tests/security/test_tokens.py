"""Join tokens: a wrong or missing one fails at once and says so; the right one joins; a
captured connection replayed on another connection is refused."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from security_fixtures import (
    RecordingProxy,
    create_actor_with_pickle,
    encode,
    receiving,
    replay,
    wait_until,
)

import zmesh
from zmesh.errors import AuthenticationError
from zmesh.security.keys import ClusterCredentials, read_token_file
from zmesh.security.probe import handshake
from zmesh.testing import Cluster
from zmesh.transports import open_endpoint


@zmesh.remote
def ping() -> str:
    return "pong"


def test_a_driver_with_a_wrong_token_is_refused_with_an_error_that_says_so(
        mesh: Cluster) -> None:
    wrong = ClusterCredentials.generate().token
    with pytest.raises(AuthenticationError, match="join token is wrong"):
        zmesh.init(address=f"tcp://{mesh.address}", token=wrong)
    assert not zmesh.is_initialized()


def test_a_malformed_token_is_refused_naming_it(mesh: Cluster) -> None:
    with pytest.raises(AuthenticationError, match="malformed zmesh join token"):
        zmesh.init(address=f"tcp://{mesh.address}", token=mesh.token[:-3])


def test_a_driver_with_the_right_token_connects_over_tcp(mesh: Cluster) -> None:
    zmesh.init(address=f"tcp://{mesh.address}", token=mesh.token)
    try:
        assert zmesh.get(ping.remote(), timeout=60) == "pong"
    finally:
        zmesh.shutdown()


def test_a_node_joining_with_a_wrong_token_exits_at_once_saying_why(mesh: Cluster) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZMESH_TOKEN")}
    proc = subprocess.run(
        [sys.executable, "-m", "zmesh", "node", "--join", mesh.address,
         "--token", ClusterCredentials.generate().token],
        capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 2
    assert "join token is wrong" in proc.stderr


def test_a_node_joining_a_remote_mesh_without_a_token_exits_at_once_saying_why() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZMESH_TOKEN")}
    proc = subprocess.run([sys.executable, "-m", "zmesh", "node", "--join", "127.0.0.1:9"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 2
    assert "no join token" in proc.stderr


def test_the_node_keeps_its_token_in_a_private_file(mesh: Cluster) -> None:
    assert mesh.head_node is not None
    path = os.path.join(mesh.head_node.session_dir, "cluster.token")
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert read_token_file(path) == mesh.credentials


def test_a_token_file_readable_by_others_is_refused(tmp_path: object, mesh: Cluster) -> None:
    path = os.path.join(str(tmp_path), "token")
    with open(path, "w") as f:
        f.write(mesh.token)
    os.chmod(path, 0o644)
    with pytest.raises(AuthenticationError, match="readable by others"):
        read_token_file(path)


def test_a_captured_connection_replayed_on_another_is_refused(tmp_path: object) -> None:
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1},
                      shutdown_at_exit=False)
    try:
        host, port = cluster.address.rsplit(":", 1)
        proxy = RecordingProxy((host, int(port)))
        marker = os.path.join(str(tmp_path), "ran")
        with open_endpoint("tcp://127.0.0.1:0", credentials=cluster.credentials) as member:
            member.send(f"tcp://127.0.0.1:{proxy.port}",
                        [encode(create_actor_with_pickle(marker, member.address))])
            wait_until(receiving(member, lambda: os.path.exists(marker)), 60,
                       "the member's message to arrive")
        captured = proxy.recorded()
        proxy.close()
        assert len(captured) > 64  # the greeting, the CURVE handshake and the message
        os.unlink(marker)
        assert replay(host, int(port), captured), "the node kept the replayed connection open"
        handshake(f"tcp://{cluster.address}", cluster.credentials)  # the node still serves
        assert not os.path.exists(marker), "a replayed message was accepted"
    finally:
        cluster.shutdown()
