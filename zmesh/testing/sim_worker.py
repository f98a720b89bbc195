"""Simulated workers: the real executor and core client, on a kernel thread, in this process.

A node of the simulated mesh gets a `SimWorkerPool` instead of a fork server: `spawn` makes a
`SimProcess` with a `CoreClient` on a `SimLoop` and an `Executor` whose thread is a kernel
thread, wired exactly as a forked worker is (`zmesh.runtime.worker.main.attach`). Remote
functions run inline on that thread; `kill` makes the process vanish and tells the node as the
fork server would (a wait status of SIGKILL).

Not simulated: threaded actors (`max_concurrency > 1` runs calls one at a time here) and
async actors (their creation fails with a clear error).
"""

from __future__ import annotations

import signal
from collections import deque
from typing import TYPE_CHECKING, Any

from zmesh.protocol.messages import runtime as m
from zmesh.runtime import values
from zmesh.runtime.node.worker_pool import WorkerInfo
from zmesh.runtime.owner.client import CoreClient
from zmesh.runtime.worker.executor import Executor
from zmesh.runtime.worker.main import attach
from zmesh.testing.sim_kernel import Kernel, SimProcess
from zmesh.testing.sim_net import SimLoop

if TYPE_CHECKING:
    from zmesh.runtime.node.server import Node
    from zmesh.testing.sim_mesh import SimMesh

__all__ = ["SimExecutor", "SimWorkerPool"]

WORKER_START_S = 0.01  # virtual seconds from spawn to a registered worker


class _SimQueue:
    """The executor's work queue: `get` parks the executor thread on the kernel."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel
        self.items: deque[Any] = deque()

    def put(self, item: Any) -> None:
        self.items.append(item)

    def get(self) -> Any:
        self.kernel.wait_until(lambda: bool(self.items), None)
        return self.items.popleft()

    def empty(self) -> bool:
        return not self.items


class SimExecutor(Executor):
    """The worker's executor with its thread on the kernel (user code runs inline)."""

    def __init__(self, client: CoreClient, kernel: Kernel, proc: SimProcess) -> None:
        super().__init__(client)
        self.kernel = kernel
        self.proc = proc
        self.work = _SimQueue(kernel)  # type: ignore[assignment]

    def start(self) -> None:
        self.kernel.spawn(self.proc, self._run, f"{self.proc.name}-executor")

    def _open_inbox(self) -> None:
        return None  # calls come through the simulated loop (this thread cannot block in recv)

    def _create_actor(self, spec: m.CreateActor) -> None:
        if spec.is_async:
            err = values.encode_error(NotImplementedError(
                f"async actor {spec.class_name} cannot run on the simulated mesh"))
            self.client.loop.send_threadsafe(self.client.node_address, m.ActorState(
                actor_id=spec.actor_id, state="dead", error=err.data, class_name=spec.class_name,
                reason="async actors are not simulated (zmesh.testing.sim_mesh)"))
            return
        super()._create_actor(spec)
        if self.pool is not None:  # threaded actors run one call at a time here
            self.pool.shutdown(wait=False)
            self.pool = None


class SimWorkerPool:
    """A node's worker pool on the simulated mesh (the `WorkerPool` interface)."""

    def __init__(self, mesh: SimMesh, node: Node, proc: SimProcess) -> None:
        self.mesh = mesh
        self.node = node
        self.proc = proc
        self.by_id: dict[bytes, WorkerInfo] = {}
        self.by_pid: dict[int, WorkerInfo] = {}
        self.procs: dict[int, SimProcess] = {}
        self.clients: dict[int, CoreClient] = {}

    def spawn(self, env: dict[str, str] | None = None) -> WorkerInfo:
        kernel = self.mesh.kernel
        worker_id = kernel.rng.randbytes(8)
        info = WorkerInfo(worker_id, env_key=tuple(sorted((env or {}).items())))
        info.pid = self.mesh.next_pid()
        self.by_id[worker_id] = info
        self.by_pid[info.pid] = info
        kernel.schedule(kernel.now + WORKER_START_S, self.proc, self._start, info)
        return info

    def settled(self, info: WorkerInfo) -> None:
        """A worker registered or exited: nothing to warm up in a simulated fork server."""

    def _start(self, info: WorkerInfo) -> None:
        mesh, node = self.mesh, self.node
        host = self.proc.host
        proc = SimProcess(f"{host}/w{info.pid}", host)
        loop = SimLoop(mesh.net.bind(f"{node.address}/w{info.pid}", proc), "worker")
        client = CoreClient(node.address, node.session_dir, "worker", worker_id=info.worker_id,
                            loop=loop)
        proc.client = client
        from zmesh.store.mapping import StoreMapper

        client.node_id, client.job_id = node.node_id, node.job_id
        client.mapper = StoreMapper(node.store_dir)
        proc.on_kill.append(client.close)
        self.procs[info.pid] = proc
        self.clients[info.pid] = client
        mesh.processes.append(proc)
        executor = SimExecutor(client, mesh.kernel, proc)
        attach(client, executor)
        # A worker told to shut down exits, and its node hears of it from its fork server,
        # as a real one does: without this it stayed "retired" in the pool forever.
        loop.on(m.Shutdown, lambda s, msg, b: self._exit_soon(info))

    def _exit_soon(self, info: WorkerInfo) -> None:
        kernel = self.mesh.kernel
        kernel.schedule(kernel.now, self.proc, self._exited, info)

    def _exited(self, info: WorkerInfo) -> None:
        """The worker's process ends by itself (status 0); runs on the node's process."""
        proc = self.procs.get(info.pid)
        if proc is None or not proc.alive:
            return
        self.mesh.note(f"{proc.name} exited after Shutdown ({info.state})")
        self.mesh.kernel.kill(proc)
        self.node._worker_exited(info.pid, 0)

    def kill(self, info: WorkerInfo, sig: int = signal.SIGKILL) -> None:
        """Kill the worker's process; the node hears of its exit as from a fork server."""
        proc = self.procs.get(info.pid)
        if proc is not None and proc.alive:
            self.mesh.note(f"{proc.name} killed with signal {sig} ({info.state})")
            self.mesh.kernel.kill(proc)
        kernel = self.mesh.kernel
        if self.proc.alive:
            kernel.schedule(kernel.now, self.proc, self.node._worker_exited, info.pid, int(sig))

    def close(self) -> None:
        """Every worker dies with the node."""
        for proc in self.procs.values():
            self.mesh.kernel.kill(proc)

    def live(self) -> list[tuple[WorkerInfo, SimProcess]]:
        """Workers whose processes are alive, in start order."""
        return [(self.by_pid[pid], proc) for pid, proc in self.procs.items()
                if proc.alive and pid in self.by_pid]
