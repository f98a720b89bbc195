"""`Cluster`: several zmesh nodes on this machine (subprocesses on loopback ports) for tests.

Mirrors Ray's `ray.cluster_utils.Cluster` so that tests written for Ray port unchanged::

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    node = cluster.add_node(num_cpus=1, resources={"gpu_box": 1})
    cluster.wait_for_nodes()
    zmesh.init(address=cluster.address)
    ...
    cluster.shutdown()

Beyond Ray: `kill_node` (SIGKILL, no goodbye), `pause_node`/`resume_node` (SIGSTOP/SIGCONT).
Every node dies with the process that made the cluster, and `shutdown` removes their files.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from zmesh.errors import ZmeshError
from zmesh.runtime.launcher import new_session_dir
from zmesh.runtime.node.query import NodeQuerier
from zmesh.security.keys import INSECURE_ENV, TOKEN_ENV, ClusterCredentials
from zmesh.store.sweep import default_store_root, pid_alive

__all__ = ["Cluster", "ClusterNode"]


@dataclass(eq=False)
class ClusterNode:
    """One node of a `Cluster`: its id (as `get_runtime_context().get_node_id()` reports
    it there), its tcp address (`host:port`), its process and files."""

    node_id: str
    address: str
    ipc_address: str
    session_dir: str
    proc: subprocess.Popen[bytes]
    args: dict[str, Any] = field(default_factory=dict)
    paused: bool = False

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def node_manager_address(self) -> str:
        return self.address.rsplit(":", 1)[0]

    def alive(self) -> bool:
        return self.proc.poll() is None

    def __repr__(self) -> str:
        return f"ClusterNode({self.node_id[:8]} at {self.address}, pid={self.pid})"


class Cluster:
    """Nodes on this machine, joined into one mesh through the first node added."""

    def __init__(self, initialize_head: bool = False, connect: bool = False,
                 head_node_args: dict[str, Any] | None = None,
                 shutdown_at_exit: bool = True) -> None:
        self.head_node: ClusterNode | None = None
        self.worker_nodes: set[ClusterNode] = set()
        self._removed: list[ClusterNode] = []
        self._querier: NodeQuerier | None = None
        self._blocked: dict[str, set[str]] = {}  # node address -> addresses cut from it
        # The cluster's own mesh credentials: its nodes, queries and drivers use them.
        self.credentials = ClusterCredentials.generate()
        if shutdown_at_exit:
            atexit.register(self.shutdown)
        if initialize_head:
            self.add_node(**(head_node_args or {}))
            if connect:
                self.connect()
        elif connect:
            raise ValueError("Cluster(connect=True) needs initialize_head=True")

    # -- nodes -----------------------------------------------------------------------------
    @property
    def token(self) -> str:
        """The join token of the cluster's mesh (``init(address=..., token=...)``)."""
        return self.credentials.token

    @property
    def address(self) -> str | None:
        """`host:port` of the head node, for `zmesh.init(address=...)`; None before the first
        node is added (as Ray's `Cluster.address`)."""
        if self.head_node is None:
            return None
        return self.head_node.address

    def list_all_nodes(self) -> list[ClusterNode]:
        """The head node first, then the others in the order they were added."""
        head = [self.head_node] if self.head_node is not None else []
        return head + sorted(self.worker_nodes, key=lambda n: n.proc.pid)

    def add_node(self, wait: bool = True, **node_args: Any) -> ClusterNode:
        """Start a node (num_cpus=1 unless given) and join it to the cluster.

        Accepts num_cpus, num_gpus, resources, object_store_memory and labels. With `wait`,
        returns once every live node knows the new one.
        """
        known = {"num_cpus", "num_gpus", "resources", "object_store_memory", "labels"}
        unknown = set(node_args) - known
        if unknown:
            raise TypeError(f"add_node() got unknown node arguments {sorted(unknown)}; "
                            f"it takes {sorted(known)}")
        session_dir = new_session_dir()
        cmd = [sys.executable, "-m", "zmesh.runtime.node.main", "--session-dir", session_dir,
               "--num-cpus", str(float(node_args.get("num_cpus", 1))),
               "--num-gpus", str(float(node_args.get("num_gpus", 0))),
               "--resources", json.dumps(node_args.get("resources") or {}),
               "--labels", json.dumps(node_args.get("labels") or {}),
               "--object-store-memory", str(int(node_args.get("object_store_memory") or
                                                 256 * 1024 * 1024)),
               "--parent-pid", str(os.getpid()), "--testing"]
        if self.head_node is not None:
            cmd += ["--join", self.head_node.address]
        env = dict(os.environ, ZMESH_LAZY_IMPORT="1")  # a node needs only its internals
        env[TOKEN_ENV] = self.credentials.token
        env.pop(INSECURE_ENV, None)
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, env=env)
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        proc.stdout.close()
        if not line.startswith("ZMESH-NODE-READY"):
            proc.kill()
            proc.wait()
            shutil.rmtree(session_dir, ignore_errors=True)
            raise ZmeshError(f"a cluster node failed to start (exit code {proc.poll()}): "
                             f"{line!r}")
        _, ipc, node_id, tcp = line.split()
        node = ClusterNode(node_id, tcp[len("tcp://"):], ipc, session_dir, proc, dict(node_args))
        if self.head_node is None:
            self.head_node = node
        else:
            self.worker_nodes.add(node)
        if wait:
            self.wait_for_nodes()
        return node

    def remove_node(self, node: ClusterNode, allow_graceful: bool = True) -> None:
        """Stop a node: gracefully (it announces its departure), or with SIGKILL."""
        if node.paused:
            self.resume_node(node)
        if allow_graceful:
            node.proc.terminate()
            try:
                node.proc.wait(15)
            except subprocess.TimeoutExpired:
                node.proc.kill()
                node.proc.wait()
        else:
            node.proc.kill()
            node.proc.wait()
        self._forget(node)

    def kill_node(self, node: ClusterNode) -> None:
        """SIGKILL the node: no goodbye; the others must notice by themselves."""
        self.remove_node(node, allow_graceful=False)

    def pause_node(self, node: ClusterNode) -> None:
        """SIGSTOP the node (its workers keep running); it answers nobody until resumed."""
        os.kill(node.pid, signal.SIGSTOP)
        node.paused = True

    def resume_node(self, node: ClusterNode) -> None:
        """SIGCONT a paused node."""
        os.kill(node.pid, signal.SIGCONT)
        node.paused = False

    def _forget(self, node: ClusterNode) -> None:
        if node is self.head_node:
            self.head_node = None
        self.worker_nodes.discard(node)
        self._removed.append(node)
        _remove_files(node)

    # -- faults ----------------------------------------------------------------------------
    def cut(self, side_a: Iterable[ClusterNode], side_b: Iterable[ClusterNode]) -> None:
        """Cut the links between two sets of nodes, both ways: every node drops what it would
        send to, or receives from, a node on the other side (as a network partition would)."""
        side_a, side_b = list(side_a), list(side_b)
        for here, there in ((side_a, side_b), (side_b, side_a)):
            for node in here:
                self._blocked.setdefault(node.address, set()).update(
                    f"tcp://{n.address}" for n in there)
                self._send_blocked(node)

    def heal(self) -> None:
        """Restore every link cut with `cut`."""
        for node in self.list_all_nodes():
            if self._blocked.pop(node.address, None) and node.alive():
                self._send_blocked(node)

    def _send_blocked(self, node: ClusterNode) -> None:
        import msgspec

        arg = msgspec.msgpack.encode(sorted(self._blocked.get(node.address, set())))
        self._querier_().query(node.address, "block", arg)

    # -- views -----------------------------------------------------------------------------
    def query(self, node: ClusterNode, what: str, timeout: float = 5.0) -> Any:
        """Ask one node for its state (`nodes`, `actors`, `pending`, ...)."""
        return self._querier_().query(node.address, what, timeout=timeout)

    def _querier_(self) -> NodeQuerier:
        if self._querier is None:
            self._querier = NodeQuerier(credentials=self.credentials)
        return self._querier

    def live_view(self, node: ClusterNode) -> set[str]:
        """The node ids `node` counts as alive (itself included)."""
        return {row["NodeID"] for row in self.query(node, "nodes") if row["Alive"]}

    def wait_for_nodes(self, timeout: float = 30.0) -> None:
        """Wait until every live node of the cluster knows exactly the live nodes."""
        deadline = time.monotonic() + timeout
        while True:
            nodes = [n for n in self.list_all_nodes() if n.alive() and not n.paused]
            want = {n.node_id for n in nodes}
            try:
                if all(self.live_view(n) == want for n in nodes):
                    return
            except ZmeshError:
                pass
            if time.monotonic() > deadline:
                views = {n.node_id[:8]: sorted(i[:8] for i in self.live_view(n)) for n in nodes}
                raise TimeoutError(f"cluster nodes did not agree on membership within "
                                   f"{timeout:g}s: want {sorted(i[:8] for i in want)}, "
                                   f"views {views}")
            time.sleep(0.05)

    def connect(self, namespace: str | None = None) -> dict[str, Any]:
        """`zmesh.init(address=self.address)`."""
        import zmesh

        if self.address is None:
            raise ZmeshError("the cluster has no head node yet; call add_node() first")
        return dict(zmesh.init(address=self.address, namespace=namespace, token=self.token))

    def shutdown(self) -> None:
        """Disconnect a driver connected here, stop every node, remove their files."""
        import zmesh

        if zmesh.is_initialized():
            zmesh.shutdown()
        for node in self.list_all_nodes():
            self.remove_node(node)
        for node in self._removed:
            if node.proc.poll() is None:
                node.proc.kill()
                node.proc.wait()
        if self._querier is not None:
            self._querier.close()
            self._querier = None


def _remove_files(node: ClusterNode) -> None:
    """A node killed with -9 leaves its session and store directories: take them away."""
    deadline = time.monotonic() + 10
    while pid_alive(node.pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    shutil.rmtree(node.session_dir, ignore_errors=True)
    shutil.rmtree(os.path.join(default_store_root(), node.node_id), ignore_errors=True)
