"""The node process: clients, worker leases, the object store, actors and placement groups.

One event loop thread owns the socket; the sans-IO scheduler decides where work runs; the
worker pool forks workers. Run with `python -m zmesh.runtime.node.main` (or `zmesh node`).
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import signal
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import msgspec

from zmesh.core import node_lease_events as nl
from zmesh.core.lease_records import Lease
from zmesh.core.resources import NodeResources
from zmesh.core.scheduler import LocalScheduler
from zmesh.core.scheduling import Decision, Dispatch, Failed, Forward, Infeasible
from zmesh.errors import TransportError
from zmesh.protocol.messages import runtime as m
from zmesh.protocol.messages.common import Ping, Pong
from zmesh.protocol.messages.ops import TaskEvents, UserMetrics
from zmesh.runtime.ids import random_id
from zmesh.runtime.loop import EventLoop
from zmesh.runtime.node.actors import ActorManager
from zmesh.runtime.node.answers import NodeAnswers
from zmesh.runtime.node.control import ControlAgent
from zmesh.runtime.node.credentials import HelloDesk
from zmesh.runtime.node.forward import Forwarder, ForwardPorts
from zmesh.runtime.node.groups import GROUP_DECISIONS, GroupRelay
from zmesh.runtime.node.leases import LeasePorts, LeaseShell
from zmesh.runtime.node.mesh import MeshAgent
from zmesh.runtime.node.mesh_query import MeshQueries
from zmesh.runtime.node.objects import NodeObjects
from zmesh.runtime.node.ops import NodeOps
from zmesh.runtime.node.store_room import RoomPorts, StoreRoom
from zmesh.runtime.node.test_hooks import TestHooks
from zmesh.runtime.node.worker_pool import WorkerInfo, WorkerPool
from zmesh.runtime.node.zygote import describe_status
from zmesh.runtime.owner.node_watch import node_timeout_s
from zmesh.security.keys import installed as installed_credentials
from zmesh.store.object_store import ObjectStore
from zmesh.store.sweep import (
    create_node_store_dir,
    default_store_root,
    ensure_store_root,
    pid_alive,
    remove_node_store_dir,
    sweep_dead_stores,
)
from zmesh.transports import open_endpoint
from zmesh.transports.base import Endpoint
from zmesh.transports.chaos import ChaosEndpoint

if TYPE_CHECKING:  # (imported lazily through the registry: zmq on first use, off the
    # start-up path that the fork server and the first task wait on)
    from zmesh.transports.zmq_transport import ZmqEndpoint

logger = logging.getLogger("zmesh.node")

LIVENESS_PERIOD_S = 0.25


class ClientInfo(msgspec.Struct, eq=False, dict=True):
    address: str
    kind: str
    pid: int
    log_to_driver: bool
    seen: float = 0.0  # when it last pinged (a driver over tcp is dead after long silence)


class Node:
    """A zmesh node; everything runs on its loop thread except the fork server reader."""

    def __init__(self, session_dir: str, *, num_cpus: float, num_gpus: float,
                 resources: dict[str, float], object_store_memory: int,
                 parent_pid: int = 0, job_id: str = "", host: str = "127.0.0.1", port: int = 0,
                 labels: dict[str, str] | None = None, loop: EventLoop | None = None,
                 make_pool: Callable[[Node], Any] | None = None,
                 rng: random.Random | None = None, insecure: bool = False,
                 testing: bool = False, store_root: str | None = None) -> None:
        """With `loop`, the node runs on that loop's endpoint (any transport: peers and local
        clients share its one address) and `make_pool(node)` makes its worker pool; without,
        it binds tcp for peers plus an ipc socket for local clients, and forks workers.
        `insecure`: tcp without CURVE; `testing`: take faults at run time (see test_hooks:
        the chaos transport around the endpoint and the block/chaos/workers queries)."""
        self.node_id = random_id(14).hex()
        self.testing = testing  # test hooks (the "block" query) exist only when set
        self.session_dir = session_dir
        self.parent_pid = parent_pid
        self.job_id = job_id or random_id(4).hex()
        self.hooks: TestHooks | None = None
        if loop is None:
            # Peers reach the node on tcp (its identity in the mesh); local clients on ipc.
            # tcp is CURVE with the installed cluster credentials (node/credentials.py).
            zmq_endpoint = cast("ZmqEndpoint", open_endpoint(f"tcp://{host}:{port}",
                                                             insecure=insecure))
            self.endpoint: Endpoint = zmq_endpoint
            self.mesh_address = zmq_endpoint.address
            self.address = zmq_endpoint.bind_also(
                f"ipc://{os.path.join(session_dir, 'node.sock')}")
            if testing:  # a node for tests takes faults at run time (zmesh.testing)
                self.endpoint = ChaosEndpoint(self.endpoint, seed=int.from_bytes(
                    bytes.fromhex(self.node_id[:8]), "big"))
            self.loop = EventLoop(self.endpoint, "node")
        else:
            self.endpoint = loop.endpoint
            self.mesh_address = self.address = loop.address
            self.loop = loop
        root = ensure_store_root(store_root or default_store_root())
        if store_root is None:
            sweep_dead_stores(root)
        self.store_dir = create_node_store_dir(root, self.node_id)
        self.store = ObjectStore(self.store_dir, object_store_memory)
        total = {"CPU": float(num_cpus), **({"GPU": float(num_gpus)} if num_gpus else {}),
                 "memory": float(total_memory()), "object_store_memory": float(object_store_memory),
                 f"node:{self.node_id}": 1.0, **resources}
        self.labels = dict(labels or {})
        self.scheduler = LocalScheduler(self.node_id, total, self.labels)
        self.num_cpus = num_cpus
        self.clients: dict[str, ClientInfo] = {}
        self.workers: dict[str, WorkerInfo] = {}
        self.functions: dict[bytes, bytes] = {}
        self.warned: set[tuple[str, str]] = set()
        self.stopping = False
        self.client_timeout = node_timeout_s()
        self._last_liveness = self.loop.clock()
        self.exit_error: str | None = None  # why the node stopped itself, for its exit status
        self.pool: Any = make_pool(self) if make_pool is not None else WorkerPool(
            self.address, session_dir, self.loop.call_soon, self._worker_exited,
            {"ZMESH_NODE_ID": self.node_id, "ZMESH_STORE_DIR": self.store_dir,
             "ZMESH_JOB_ID": self.job_id, **_worker_bind_env(host), **_mesh_env()})
        self.control = ControlAgent(self.loop, self.mesh_address)
        self.actors = ActorManager(self)
        self.forwarder = Forwarder(ForwardPorts(
            send=self.loop.send, on=self.loop.on, own_address=self.mesh_address,
            live_address=lambda nid: self.mesh.live_address(nid) if self.mesh else None,
            function_blob=lambda fid: self.functions.get(fid, b""),
            actor_entry=lambda aid: self.actors.actors.get(aid),
            schedule_actor=lambda entry: self.actors.schedule(entry),
            host_actor=lambda *a, **k: self.actors.host_forwarded(*a, **k),
            lease_request=lambda *a, **k: self.lease_shell.request(*a, **k),
            lease_event=lambda event: self.lease_shell.handle(event),
            actors_node_gone=lambda *a: self.actors.node_gone(*a),
            groups_node_gone=lambda *a: self.groups.node_gone(*a)))
        self.groups = GroupRelay(self)
        self.mesh_queries = MeshQueries(self)
        self.lease_shell = LeaseShell(self.scheduler, LeasePorts(
            send=self.loop.send, spawn=lambda: self.pool.spawn(),
            kill=lambda info, sig: self.pool.kill(info, sig), set_timer=self.loop.call_later,
            decided=self._decided, actor_worker_died=self.actors.worker_died,
            send_lease=self.forwarder.send_lease, passed_on=self.forwarder.note_passed_on,
            follow_passed_on=self.forwarder.return_passed_on, warn=self.warn,
            count_submitted=lambda name: self.ops.count_submitted(name)))
        self.mesh: MeshAgent | None = MeshAgent(
            self.loop, self.mesh_address, self.node_id, total=self.scheduler.total,
            free=self.scheduler.available, labels=self.labels, ipc_address=self.address,
            pid=os.getpid(), on_view=self._on_view, on_gone=self._node_gone, rng=rng,
            on_join_failed=self._join_failed)
        self.objects = NodeObjects(self)
        self.room = StoreRoom(self.store, self.node_id, RoomPorts(
            send=self.loop.send, call_later=self.loop.call_later, clock=self.loop.clock,
            note_owner=self.objects.note_owner, live=self.clients.__contains__))
        self.ops = NodeOps(session_dir, self.node_id, self._worker_pid)
        self.answers = NodeAnswers(self)
        self.hello = HelloDesk(self.loop, self.node_id, installed_credentials())
        if self.mesh is not None:
            self.mesh.on_event = self.ops.count_membership
            self.mesh.on_back = self._node_back
            self.mesh.on_declared_dead = self._fence
        if testing and isinstance(self.endpoint, ChaosEndpoint):
            self.hooks = TestHooks(self.loop, self.endpoint, self.workers, self._actor_name)
        self._register_handlers()

    # -- wiring ----------------------------------------------------------------------------
    def _register_handlers(self) -> None:
        on = self.loop.on
        on(m.RegisterClient, self._on_register)
        on(Ping, self._on_ping)
        on(m.ExportFunction, lambda s, msg, b: self.functions.__setitem__(msg.fn_id, msg.blob))
        on(m.AllocObject, self.room.on_alloc)
        on(m.UnpinObject, self.room.on_unpin)
        on(m.LogLines, self._on_log)
        on(TaskEvents, self.ops.on_task_events)
        on(UserMetrics, self.ops.on_user_metrics)
        on(m.Query, self.answers.on_query)
        on(m.Shutdown, lambda s, msg, b: self.stop(msg.reason))
        self.actors.register(self.loop)
        self.lease_shell.register(self.loop)
        self.objects.register(self.loop)

    def start(self, join: list[str] | None = None) -> None:
        """Start workers, timers and the mesh join; the loop must run afterwards."""
        self.lease_shell.handle(nl.PrestartWorkers(max(1, min(int(self.num_cpus), 8))))
        self.loop.call_later(LIVENESS_PERIOD_S, self._check_liveness)
        if self.mesh is not None:
            self.loop.call_soon(self.mesh.start, list(join or []))

    def run(self, join: list[str] | None = None) -> None:
        self.start(join)
        self.loop.run()
        self._teardown()

    def stop(self, reason: str = "") -> None:
        if not self.stopping:
            logger.debug("node stopping: %s", reason)
            self.stopping = True
            self.lease_shell.handle(nl.NodeStopping())
            if self.mesh is not None:
                self.mesh.leave()
            self.loop.stop()

    def _join_failed(self, why: str) -> None:
        self.exit_error = why
        self.stop(why)

    def _on_view(self, view: dict[str, NodeResources]) -> None:
        if self.mesh is not None:
            live = (self.mesh.live_address(node_id) for node_id in view)
            self.control.set_members(a for a in live if a is not None)
        self.apply(self.scheduler.update_cluster(view))

    def _fence(self) -> None:
        """The mesh declared this node dead: every other node gave up on its processes
        (their leases failed, their actors restarted elsewhere, owners dropped their borrows
        and refuse them for good). Its workers stop, as a raylet's do when the GCS marks it
        dead; the node lives on, and the workers it starts from now on are new processes
        (owners accept them once they hear the node is back, `NodeBack`). Drivers attached
        here are not stopped: their owned objects were already given up by the others."""
        self.actors.fence()
        self.groups.fence()
        self.objects.fence()
        for info in list(self.pool.by_pid.values()):
            self.pool.kill(info, signal.SIGKILL)

    def _node_back(self, node_id: str, address: str) -> None:
        """A node we reported dead answers again (paused, cut off): see NodeBack."""
        self.objects.node_back(node_id, address)
        self.groups.node_back(node_id, address)

    def _node_gone(self, node_id: str, address: str, why: str) -> None:
        self.objects.node_gone(node_id, address, why)
        self.forwarder.node_gone(node_id, address, why)

    def teardown(self) -> None:
        """Release the pool, the store and the endpoint once the loop has returned."""
        self._teardown()

    def _teardown(self) -> None:
        for client in list(self.clients.values()):
            if client.kind == "driver":
                self.loop.send(client.address, m.Shutdown(reason="node stopped"))
        self.pool.close()
        self.objects.close()
        self.store.close()
        remove_node_store_dir(self.store_dir)
        self.endpoint.close()
        if self.parent_pid:  # a private session: its driver may be gone (SIGKILL) and not clean up
            shutil.rmtree(self.session_dir, ignore_errors=True)

    # -- clients ---------------------------------------------------------------------------
    def _on_register(self, sender: str, msg: m.RegisterClient, bufs: list[Any]) -> None:
        self.clients[msg.address] = ClientInfo(msg.address, msg.kind, msg.pid, msg.log_to_driver,
                                               seen=self.loop.clock())
        self.loop.send(msg.address, m.ClientRegistered(
            node_id=self.node_id, node_address=self.address, store_dir=self.store_dir,
            job_id=self.job_id, pid=os.getpid()))
        if msg.kind == "worker":
            self._worker_ready(msg)

    def _check_liveness(self) -> None:
        if self.parent_pid and not pid_alive(self.parent_pid):
            self.stop("the driver that started this node exited")
            return
        now = self.loop.clock()
        if now - self._last_liveness > self.client_timeout / 2:
            for client in self.clients.values():  # the node stood still, not its drivers
                client.seen = now
        self._last_liveness = now
        silent_limit = now - self.client_timeout
        for client in list(self.clients.values()):
            if client.kind != "driver":
                continue
            # A client on this machine (ipc) has a pid we can check; one over tcp pings.
            if client.address.startswith("ipc://"):
                if not pid_alive(client.pid):
                    self._client_gone(client.address)
            elif client.seen < silent_limit:
                logger.info("driver %s silent for %.0fs: taken as dead", client.address,
                            self.loop.clock() - client.seen)
                self._client_gone(client.address)
        self.loop.call_later(LIVENESS_PERIOD_S, self._check_liveness)

    def _on_ping(self, sender: str, msg: Ping, bufs: list[Any]) -> None:
        client = self.clients.get(sender)
        if client is not None:
            client.seen = self.loop.clock()
        self.loop.send(sender, Pong(seq=msg.seq))

    def _client_gone(self, address: str) -> None:
        """A driver or worker died: what it owned goes, on every node (its leases' workers
        stop, even mid-task; its actors, placement groups, objects and pins are freed)."""
        self.clients.pop(address, None)
        self.lease_shell.handle(nl.OwnerDied(address))
        self.actors.owner_died(address)
        self._store_call(self.store.release_client, address)
        self.objects.owner_gone(address)
        # Its socket is gone: close our connection to it, so fds stay bounded.
        self.loop.call_soon(self._disconnect, address)

    # -- workers and leases ----------------------------------------------------------------
    def _worker_ready(self, msg: m.RegisterClient) -> None:
        info = self.pool.by_id.get(msg.worker_id)
        if info is None:
            return
        info.address = msg.address
        info.pid = info.pid or msg.pid
        self.pool.by_pid[info.pid] = info
        self.workers[msg.address] = info
        self.lease_shell.worker_ready(info)
        self.pool.settled(info)

    def take_idle_worker(self, waiter: Any) -> None:
        """Hand an idle worker to `waiter(info)`, starting one if none is idle."""
        self.lease_shell.take_worker(waiter)

    @property
    def leases(self) -> dict[bytes, Lease]:
        """The leases this node holds or forwarded (the lease core's table)."""
        return self.lease_shell.leases

    def apply(self, decisions: list[Decision]) -> None:
        """Carry out the scheduler's decisions (the lease core takes those about leases)."""
        self.lease_shell.handle(nl.Scheduled(tuple(decisions)))

    def _decided(self, d: Decision) -> None:
        """A decision about an actor or a placement group."""
        if isinstance(d, Dispatch):
            self.actors.on_dispatch(d)
        elif isinstance(d, Infeasible):
            owner, name = self.actors.owner_of(d.work_id), self.actors.name_of(d.work_id)
            self.warn(owner, name, f"{name} cannot be scheduled on any node: {d.reason}. It "
                      "stays pending until a node that fits joins.")
        elif isinstance(d, Failed):
            self.actors.on_failed(d)
        elif isinstance(d, Forward):
            self.forwarder.forward(d)
        elif isinstance(d, GROUP_DECISIONS):
            self.groups.carry_out(d)
        else:
            self.actors.on_decision(d)
            self.groups.on_decision(d)

    def warn(self, owner: str | None, subject: str, text: str) -> None:
        if owner is None or (subject, text) in self.warned:
            return
        self.warned.add((subject, text))
        self.loop.send(owner, m.DriverWarning(text=text, subject=subject))

    def _worker_exited(self, pid: int, status: int) -> None:
        self.ops.worker_gone(pid)
        info = self.pool.by_pid.pop(pid, None)
        if info is None:
            return
        self.pool.by_id.pop(info.worker_id, None)
        self.workers.pop(info.address, None)
        reason = describe_status(status)
        info.state = "dead"
        if info.address:  # what it owned dies with it: leases, actors it created, store pins
            self._client_gone(info.address)
        self.lease_shell.worker_exited(info, reason)
        self.pool.settled(info)

    def _disconnect(self, address: str) -> None:
        try:
            self.endpoint.disconnect(address)
        except TransportError:
            pass

    # -- objects ---------------------------------------------------------------------------
    def _store_call(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as exc:
            logger.warning("store: %s%r failed: %s", getattr(fn, "__name__", fn), args[:1], exc)
            return None

    def _worker_pid(self, address: str) -> int:
        info = self.workers.get(address)
        return info.pid if info is not None else 0

    def _on_log(self, sender: str, msg: m.LogLines, bufs: list[Any]) -> None:
        self.ops.keep_log(sender, msg.prefix, msg.lines, msg.stderr)
        for client in self.clients.values():
            if client.kind == "driver" and client.log_to_driver:
                self.loop.send(client.address, msg)

    def _actor_name(self, actor_id: bytes) -> str:
        entry = self.actors.actors.get(actor_id)
        return entry.spec.name or entry.spec.class_name if entry is not None else ""


def is_loopback(host: str) -> bool:
    """True for addresses only this machine can reach."""
    return host in ("127.0.0.1", "localhost", "::1", "") or host.startswith("127.")


def _worker_bind_env(host: str) -> dict[str, str]:
    """Workers of a node on a real interface bind tcp there, so owners on other machines can
    reach them; on loopback they keep the faster ipc sockets."""
    if is_loopback(host):
        return {}
    return {"ZMESH_WORKER_BIND": f"tcp://{host}:0"}


def _mesh_env() -> dict[str, str]:
    """The mesh the node's workers belong to, as the node resolved it (token, or insecure):
    the fork server may have been forked before that (node/main.py), so it goes with every
    spawn; a worker without it would make a mesh of its own that nobody reaches over tcp."""
    from zmesh.security import keys

    if os.environ.get(keys.INSECURE_ENV) == "1":
        return {keys.INSECURE_ENV: "1"}
    token = os.environ.get(keys.TOKEN_ENV, "")
    return {keys.TOKEN_ENV: token} if token else {}


def total_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 8 << 30
