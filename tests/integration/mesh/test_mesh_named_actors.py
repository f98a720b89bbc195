"""Named actors cluster-wide (kept in the control store): a driver on any node finds a name,
a name is unique across the mesh, and a handle used on another node follows the actor."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest

import zmesh
from zmesh.exceptions import RayActorError
from zmesh.testing import Cluster


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    c.add_node(num_cpus=1, resources={"far": 1})
    zmesh.init(address=c.address, namespace="shop")
    yield c
    c.shutdown()


@zmesh.remote(num_cpus=0)
class Register:
    def __init__(self) -> None:
        self.n = 0

    def add(self) -> int:
        self.n += 1
        return self.n

    def node(self) -> str:
        return zmesh.get_runtime_context().get_node_id()


def other_node(cluster: Cluster) -> str:
    return next(n.address for n in cluster.list_all_nodes() if n is not cluster.head_node)


def run_driver(address: str, body: str) -> str:
    """Run a driver connected to `address` (namespace 'shop'); returns its stdout."""
    code = textwrap.dedent("""
        import zmesh
        zmesh.init(address=%r, namespace="shop")
        @zmesh.remote(num_cpus=0)
        class Register:
            def add(self): return -1
        """) % address + textwrap.dedent(body) + "\nzmesh.shutdown()\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_a_driver_on_another_node_finds_a_named_actor_and_calls_it(cluster: Cluster) -> None:
    reg = Register.options(name="till", lifetime="detached").remote()
    assert zmesh.get(reg.add.remote(), timeout=30) == 1
    out = run_driver(other_node(cluster), """
        h = zmesh.get_actor("till")
        print("got", zmesh.get(h.add.remote(), timeout=30))
        """)
    assert "got 2" in out
    assert zmesh.get(reg.add.remote(), timeout=30) == 3
    zmesh.kill(reg)


def test_a_name_taken_through_one_node_is_refused_through_another(cluster: Cluster) -> None:
    reg = Register.options(name="ledger", lifetime="detached").remote()
    zmesh.get(reg.add.remote(), timeout=30)
    out = run_driver(other_node(cluster), """
        try:
            Register.options(name="ledger").remote()
            print("created")
        except ValueError as exc:
            print("refused:", exc)
        """)
    assert "refused:" in out and "ledger" in out
    zmesh.kill(reg)


def test_a_killed_named_actor_frees_its_name_cluster_wide(cluster: Cluster) -> None:
    reg = Register.options(name="drawer", lifetime="detached").remote()
    zmesh.get(reg.add.remote(), timeout=30)
    zmesh.kill(reg)
    with pytest.raises(RayActorError):
        zmesh.get(reg.add.remote(), timeout=30)
    out = run_driver(other_node(cluster), """
        import time
        for _ in range(100):  # the home deletes the name once the death is final
            try:
                zmesh.get_actor("drawer")
            except ValueError:
                break
            time.sleep(0.05)
        r = Register.options(name="drawer", lifetime="detached").remote()
        print("again", zmesh.get(r.add.remote(), timeout=30))
        zmesh.kill(r)
        """)
    assert "again -1" in out
