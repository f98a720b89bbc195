"""The node process: clients, worker leases, the object store, actors and placement groups.

One event loop thread owns the socket; the sans-IO scheduler decides where work runs; the
worker pool forks workers. Run with `python -m zmesh.runtime.node` (or `zmesh node`).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import sys
from dataclasses import dataclass
from typing import Any

import msgspec

from zmesh.core.scheduler import LocalScheduler
from zmesh.core.scheduling import Dispatch, Failed, Infeasible, Pending, Request
from zmesh.protocol.messages import runtime as m
from zmesh.runtime import values
from zmesh.runtime.ids import random_id
from zmesh.runtime.loop import EventLoop
from zmesh.runtime.node_actors import ActorManager
from zmesh.runtime.strategies import decode_strategy
from zmesh.runtime.worker_pool import WorkerInfo, WorkerPool
from zmesh.runtime.zygote import describe_status, set_parent_death_signal
from zmesh.store.object_store import ObjectStore
from zmesh.store.sweep import (
    create_node_store_dir,
    default_store_root,
    ensure_store_root,
    remove_node_store_dir,
    sweep_dead_stores,
)
from zmesh.transports import open_endpoint

logger = logging.getLogger("zmesh.node")

LIVENESS_PERIOD_S = 0.25


@dataclass(eq=False)
class ClientInfo:
    address: str
    kind: str
    pid: int
    log_to_driver: bool


@dataclass(eq=False)
class LeaseInfo:
    lease_id: bytes
    owner: str
    request_id: int
    name: str
    worker: WorkerInfo | None = None
    holds: bool = True  # False while its worker is blocked in get and lent its CPU out


class Node:
    """A zmesh node; everything runs on its loop thread except the fork server reader."""

    def __init__(self, session_dir: str, *, num_cpus: float, num_gpus: float,
                 resources: dict[str, float], object_store_memory: int,
                 parent_pid: int = 0, job_id: str = "") -> None:
        self.node_id = random_id(14).hex()
        self.session_dir = session_dir
        self.parent_pid = parent_pid
        self.job_id = job_id or random_id(4).hex()
        self.endpoint = open_endpoint(f"ipc://{os.path.join(session_dir, 'node.sock')}")
        self.address = self.endpoint.address
        self.loop = EventLoop(self.endpoint, "node")
        root = ensure_store_root(default_store_root())
        sweep_dead_stores(root)
        self.store_dir = create_node_store_dir(root, self.node_id)
        self.store = ObjectStore(self.store_dir, object_store_memory)
        total = {"CPU": float(num_cpus), **({"GPU": float(num_gpus)} if num_gpus else {}),
                 "memory": float(_total_memory()), "object_store_memory": float(object_store_memory),
                 f"node:{self.node_id}": 1.0, **resources}
        self.scheduler = LocalScheduler(self.node_id, total)
        self.num_cpus = num_cpus
        self.clients: dict[str, ClientInfo] = {}
        self.workers: dict[str, WorkerInfo] = {}
        self.idle: list[WorkerInfo] = []
        self.leases: dict[bytes, LeaseInfo] = {}
        self.waiting_for_worker: list[tuple[bytes, Dispatch]] = []
        self.functions: dict[bytes, bytes] = {}
        self.warned: set[tuple[str, str]] = set()
        self.stopping = False
        self.pool = WorkerPool(self.address, session_dir, self.loop.call_soon, self._worker_exited)
        self.actors = ActorManager(self)
        self._register_handlers()

    # -- wiring ----------------------------------------------------------------------------
    def _register_handlers(self) -> None:
        on = self.loop.on
        on(m.RegisterClient, self._on_register)
        on(m.ExportFunction, lambda s, msg, b: self.functions.__setitem__(msg.fn_id, msg.blob))
        on(m.RequestLease, self._on_request_lease)
        on(m.ReturnLease, self._on_return_lease)
        on(m.AllocObject, self._on_alloc)
        on(m.SealObject, lambda s, msg, b: self._store_call(self.store.seal, msg.object_id))
        on(m.FreeObjects, self._on_free)
        on(m.PinObject, self._on_pin)
        on(m.UnpinObject, lambda s, msg, b: self._store_call(self.store.unpin, msg.object_id,
                                                              msg.client))
        on(m.Blocked, self._on_blocked)
        on(m.LogLines, self._on_log)
        on(m.Query, self._on_query)
        on(m.Shutdown, lambda s, msg, b: self.stop(msg.reason))
        self.actors.register(self.loop)

    def run(self) -> None:
        for _ in range(max(1, min(int(self.num_cpus), 8))):
            self._prestart()
        self.loop.call_later(LIVENESS_PERIOD_S, self._check_liveness)
        self.loop.run()
        self._teardown()

    def stop(self, reason: str = "") -> None:
        if not self.stopping:
            logger.debug("node stopping: %s", reason)
            self.stopping = True
            self.loop.stop()

    def _teardown(self) -> None:
        for client in list(self.clients.values()):
            if client.kind == "driver":
                self.loop.send(client.address, m.Shutdown(reason="node stopped"))
        self.pool.close()
        self.store.close()
        remove_node_store_dir(self.store_dir)
        self.endpoint.close()
        if self.parent_pid:  # a private session: its driver may be gone (SIGKILL) and not clean up
            shutil.rmtree(self.session_dir, ignore_errors=True)

    # -- clients ---------------------------------------------------------------------------
    def _on_register(self, sender: str, msg: m.RegisterClient, bufs: list[Any]) -> None:
        self.clients[msg.address] = ClientInfo(msg.address, msg.kind, msg.pid, msg.log_to_driver)
        self.loop.send(msg.address, m.ClientRegistered(
            node_id=self.node_id, node_address=self.address, store_dir=self.store_dir,
            job_id=self.job_id))
        if msg.kind == "worker":
            self._worker_ready(msg)

    def _check_liveness(self) -> None:
        if self.parent_pid and not _alive(self.parent_pid):
            self.stop("the driver that started this node exited")
            return
        for client in list(self.clients.values()):
            if client.kind == "driver" and not _alive(client.pid):
                self._client_gone(client.address)
        self.loop.call_later(LIVENESS_PERIOD_S, self._check_liveness)

    def _client_gone(self, address: str) -> None:
        self.clients.pop(address, None)
        for lease in [le for le in self.leases.values() if le.owner == address]:
            self._release_lease(lease)
        self.actors.owner_died(address)
        self._store_call(self.store.release_client, address)

    # -- workers and leases ----------------------------------------------------------------
    def _prestart(self) -> None:
        self.pool.spawn()

    def _worker_ready(self, msg: m.RegisterClient) -> None:
        info = self.pool.by_id.get(msg.worker_id)
        if info is None:
            return
        info.address = msg.address
        info.pid = info.pid or msg.pid
        self.pool.by_pid[info.pid] = info
        self.workers[msg.address] = info
        if info.waiters:
            waiter = info.waiters.pop(0)
            waiter(info)
            return
        info.state = "idle"
        self._give_idle(info)

    def _give_idle(self, info: WorkerInfo) -> None:
        if self.waiting_for_worker:
            lease_id, decision = self.waiting_for_worker.pop(0)
            self._grant(lease_id, decision, info)
            return
        if self.actors.waiting_for_worker:
            self.actors.take_worker(info)
            return
        self.idle.append(info)

    def take_idle_worker(self, waiter: Any) -> None:
        """Hand an idle worker to `waiter(info)`, starting one if none is idle."""
        if self.idle:
            waiter(self.idle.pop())
            return
        info = self.pool.spawn()
        info.waiters.append(waiter)

    def _on_request_lease(self, sender: str, msg: m.RequestLease, bufs: list[Any]) -> None:
        lease_id = random_id(12)
        self.leases[lease_id] = LeaseInfo(lease_id, msg.owner, msg.request_id, msg.name)
        try:
            strategy = decode_strategy(msg.strategy)
            req = Request(lease_id, "task", msg.resources or {"CPU": 1.0}, strategy=strategy,
                          name=msg.name)
            decisions = self.scheduler.submit(req)
        except Exception as exc:  # bad resources, unknown node: fail the request clearly
            self.leases.pop(lease_id, None)
            self.loop.send(msg.owner, m.LeaseFailed(request_id=msg.request_id,
                                                    error=values.encode_error(exc).data))
            return
        self.apply(decisions)

    def apply(self, decisions: list[Any]) -> None:
        """Carry out the scheduler's decisions."""
        for d in decisions:
            if isinstance(d, Dispatch):
                if d.work_id in self.leases:
                    self._dispatch_lease(d)
                else:
                    self.actors.on_dispatch(d)
            elif isinstance(d, Infeasible | Pending):
                self._on_waiting(d)
            elif isinstance(d, Failed):
                self._on_failed(d)
            else:
                self.actors.on_decision(d)

    def _dispatch_lease(self, d: Dispatch) -> None:
        lease = self.leases[d.work_id]
        if lease.worker is not None:  # a blocked worker got its CPU back
            lease.holds = True
            return
        if self.idle:
            self._grant(d.work_id, d, self.idle.pop())
        else:
            self.waiting_for_worker.append((d.work_id, d))
            self.pool.spawn()

    def _grant(self, lease_id: bytes, d: Dispatch, info: WorkerInfo) -> None:
        lease = self.leases.get(lease_id)
        if lease is None:
            self._give_idle(info)
            return
        lease.worker = info
        info.state = "leased"
        info.lease_id = lease_id
        self.loop.send(lease.owner, m.LeaseGranted(request_id=lease.request_id, lease_id=lease_id,
                                                   worker_address=info.address,
                                                   gpu_ids=list(d.gpu_ids)))

    def _on_waiting(self, d: Infeasible | Pending) -> None:
        lease = self.leases.get(d.work_id)
        if lease is not None:
            self._revoke_others(lease)
        if isinstance(d, Infeasible):
            owner = lease.owner if lease is not None else self.actors.owner_of(d.work_id)
            name = lease.name if lease is not None else self.actors.name_of(d.work_id)
            self.warn(owner, name, f"{name} cannot be scheduled on any node: {d.reason}. It "
                      "stays pending until a node that fits joins.")

    def warn(self, owner: str | None, subject: str, text: str) -> None:
        if owner is None or (subject, text) in self.warned:
            return
        self.warned.add((subject, text))
        self.loop.send(owner, m.DriverWarning(text=text, subject=subject))

    def _on_failed(self, d: Failed) -> None:
        lease = self.leases.pop(d.work_id, None)
        if lease is not None:
            self.loop.send(lease.owner, m.LeaseFailed(request_id=lease.request_id,
                                                      error=values.encode_error(d.error).data))
        else:
            self.actors.on_failed(d)

    def _revoke_others(self, waiting: LeaseInfo) -> None:
        for lease in self.leases.values():
            if lease.worker is not None and lease.owner != waiting.owner or (
                    lease.worker is not None and lease.name != waiting.name):
                self.loop.send(lease.owner, m.RevokeLease(lease_id=lease.lease_id))

    def _on_return_lease(self, sender: str, msg: m.ReturnLease, bufs: list[Any]) -> None:
        lease = self.leases.get(msg.lease_id)
        if lease is not None:
            self._release_lease(lease)

    def _release_lease(self, lease: LeaseInfo) -> None:
        self.leases.pop(lease.lease_id, None)
        decisions = self.scheduler.finish(lease.lease_id) if lease.holds else \
            self.scheduler.cancel(lease.lease_id)
        info = lease.worker
        if info is not None and info.state == "leased":
            info.state = "idle"
            info.lease_id = b""
            self._give_idle(info)
        self.apply(decisions)

    def _on_blocked(self, sender: str, msg: m.Blocked, bufs: list[Any]) -> None:
        info = self.workers.get(msg.worker)
        if info is None or info.state != "leased":
            return
        lease = self.leases.get(info.lease_id)
        if lease is None:
            return
        if msg.blocked and lease.holds:
            lease.holds = False
            self.apply(self.scheduler.finish(lease.lease_id))
        elif not msg.blocked and not lease.holds:
            self.apply(self.scheduler.submit(Request(lease.lease_id, "task", {"CPU": 1.0},
                                                     name=lease.name)))

    def _worker_exited(self, pid: int, status: int) -> None:
        info = self.pool.by_pid.pop(pid, None)
        if info is None:
            return
        self.pool.by_id.pop(info.worker_id, None)
        self.workers.pop(info.address, None)
        if info in self.idle:
            self.idle.remove(info)
        reason = describe_status(status)
        prev, info.state = info.state, "dead"
        if info.address:
            self._store_call(self.store.release_client, info.address)
            self.clients.pop(info.address, None)
        if prev == "leased":
            lease = self.leases.get(info.lease_id)
            if lease is not None:
                self.loop.send(lease.owner, m.WorkerExited(
                    lease_id=lease.lease_id, worker_address=info.address,
                    reason=f"worker pid={pid} {reason}"))
                lease.worker = None
                self._release_lease(lease)
        elif prev == "actor":
            self.actors.worker_died(info, f"its worker (pid={pid}) was {reason}"
                                    if "signal" in reason else f"its worker (pid={pid}) {reason}")
        if not self.stopping and len(self.idle) < 1:
            self._prestart()

    # -- objects ---------------------------------------------------------------------------
    def _store_call(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as exc:
            logger.warning("store: %s%r failed: %s", getattr(fn, "__name__", fn), args[:1], exc)
            return None

    def _on_alloc(self, sender: str, msg: m.AllocObject, bufs: list[Any]) -> None:
        try:
            loc = self.store.allocate(msg.object_id, msg.size, owner=msg.owner)
        except Exception as exc:
            self.loop.send(sender, m.AllocReply(request_id=msg.request_id,
                                                error=values.encode_error(exc).data))
            return
        self.loop.send(sender, m.AllocReply(request_id=msg.request_id, loc=m.StoreLoc(
            node=self.node_id, segment=loc.segment, offset=loc.offset, size=loc.size,
            object_id=msg.object_id)))

    def _on_pin(self, sender: str, msg: m.PinObject, bufs: list[Any]) -> None:
        try:
            loc = self.store.pin(msg.object_id, msg.client)
        except Exception as exc:
            from zmesh.errors import ObjectLostError

            err = ObjectLostError(f"object {msg.object_id.hex()} is not in the store: {exc}")
            self.loop.send(sender, m.AllocReply(request_id=msg.request_id,
                                                error=values.encode_error(err).data))
            return
        self.loop.send(sender, m.AllocReply(request_id=msg.request_id, loc=m.StoreLoc(
            node=self.node_id, segment=loc.segment, offset=loc.offset, size=loc.size,
            object_id=msg.object_id)))

    def _on_free(self, sender: str, msg: m.FreeObjects, bufs: list[Any]) -> None:
        for oid in msg.object_ids:
            self._store_call(self.store.free, oid)

    # -- logs and queries ------------------------------------------------------------------
    def _on_log(self, sender: str, msg: m.LogLines, bufs: list[Any]) -> None:
        for client in self.clients.values():
            if client.kind == "driver" and client.log_to_driver:
                self.loop.send(client.address, msg)

    def _on_query(self, sender: str, msg: m.Query, bufs: list[Any]) -> None:
        try:
            data = self._answer(msg.what, msg.arg)
            reply = m.QueryReply(request_id=msg.request_id, data=msgspec.msgpack.encode(data))
        except Exception as exc:
            reply = m.QueryReply(request_id=msg.request_id, data=b"", error=str(exc))
        self.loop.send(sender, reply)

    def _answer(self, what: str, arg: bytes) -> Any:
        if what == "cluster_resources":
            return self.scheduler.total()
        if what == "available_resources":
            return self.scheduler.available()
        if what == "function":
            blob = self.functions.get(arg)
            if blob is None:
                raise KeyError(f"function {arg.hex()} was never exported to this node")
            return blob
        if what == "nodes":
            return [{"NodeID": self.node_id, "Alive": True, "NodeManagerAddress": "127.0.0.1",
                     "Resources": self.scheduler.total(), "alive": True}]
        if what == "store":
            st = self.store.stats()
            return {k: getattr(st, k) for k in st.__dataclass_fields__}
        return self.actors.answer(what, arg)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def _total_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 8 << 30


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="zmesh-node")
    p.add_argument("--session-dir", required=True)
    p.add_argument("--num-cpus", type=float, default=float(os.cpu_count() or 1))
    p.add_argument("--num-gpus", type=float, default=0.0)
    p.add_argument("--resources", default="{}")
    p.add_argument("--object-store-memory", type=int, default=0)
    p.add_argument("--parent-pid", type=int, default=0)
    p.add_argument("--job-id", default="")
    a = p.parse_args(argv)
    if a.parent_pid:
        set_parent_death_signal(signal.SIGTERM)
    store_mem = a.object_store_memory or int(_total_memory() * 0.3)
    node = Node(a.session_dir, num_cpus=a.num_cpus, num_gpus=a.num_gpus,
                resources=json.loads(a.resources), object_store_memory=store_mem,
                parent_pid=a.parent_pid, job_id=a.job_id)
    signal.signal(signal.SIGTERM, lambda *x: node.stop("SIGTERM"))
    signal.signal(signal.SIGINT, lambda *x: node.stop("SIGINT"))
    print(f"ZMESH-NODE-READY {node.address} {node.node_id}", flush=True)
    if a.parent_pid:  # the driver stops reading our stdout now
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
    node.run()


if __name__ == "__main__":
    logging.basicConfig(level=os.environ.get("ZMESH_LOG_LEVEL", "WARNING"), stream=sys.stderr)
    main()
