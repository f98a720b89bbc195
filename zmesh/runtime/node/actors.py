"""The node's actors and placement groups: placement, start, restart, death, names.

The node places an actor with the scheduler, hands it a pre-started worker, and tells the
owner and every subscriber of each state change (alive at an address, restarting, dead and
why). Placement groups are reserved through the same scheduler.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from zmesh.core import actor_lifecycle as life
from zmesh.core import node_lease_events as nl
from zmesh.core.exhaustive import assert_never
from zmesh.core.scheduling import (
    Dispatch,
    Failed,
    PGInfeasible,
    PGPending,
    PGReady,
    PGRemoved,
    PGRescheduling,
    Request,
)
from zmesh.protocol.messages import runtime as m
from zmesh.protocol.messages.placement import ReleaseBundles
from zmesh.runtime.loop import EventLoop
from zmesh.runtime.node import group_table
from zmesh.runtime.node.actor_entries import ActorEntry, GroupEntry
from zmesh.runtime.node.names import ActorDirectory
from zmesh.runtime.strategies import decode_strategy

# A handle can reach a process (and its SubscribeActor reach us) before the creator's
# CreateActor does: they travel on different connections. Wait this long before saying
# that no node knows the actor.
UNKNOWN_ACTOR_GRACE_S = 5.0
# How often a home node checks on the actors it forwarded to other nodes: messages between
# nodes can be lost (a link cut, a reconnect), and a lost ForwardActor or state report left
# the actor's owner waiting forever.
ACTOR_SWEEP_S = 2.0

if TYPE_CHECKING:
    from zmesh.runtime.node.server import Node
    from zmesh.runtime.node.worker_pool import WorkerInfo


class ActorManager:
    """Actor and placement-group bookkeeping for one node (loop thread only)."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.actors: dict[bytes, ActorEntry] = {}
        self.named: dict[tuple[str, str], bytes] = {}
        self.groups: dict[str, GroupEntry] = {}
        self.removed_groups = group_table.RemovedGroups()
        self.names = ActorDirectory(self)
        self.early_subscribers: dict[bytes, set[str]] = {}
        self.quiet: set[bytes] = set()  # forwarded, not alive, no word for a whole sweep
        self.sweeping = False

    def register(self, loop: EventLoop) -> None:
        loop.on(m.CreateActor, self._on_create)
        loop.on(m.ActorState, self._on_state_from_worker)
        loop.on(m.KillActor, self._on_kill)
        loop.on(m.SubscribeActor, self._on_subscribe)
        loop.on(m.GetNamedActor, self._on_get_named)
        loop.on(m.CreatePlacementGroup, self._on_create_pg)
        loop.on(m.RemovePlacementGroup, lambda s, msg, b: self._remove_pg(msg.pg_id))

    # -- creation --------------------------------------------------------------------------
    def _on_create(self, sender: str, spec: m.CreateActor, bufs: list[Any]) -> None:
        entry = ActorEntry(spec, subscribers={spec.owner})
        entry.subscribers |= self.early_subscribers.pop(spec.actor_id, set())
        self.actors[spec.actor_id] = entry
        if spec.name:
            key = (spec.namespace, spec.name)
            other = self.actors.get(self.named.get(key, b""))
            if other is not None and other.state != "dead":
                self.run(entry, life.Unschedulable(
                    f"the name {spec.name!r} is already taken in namespace {spec.namespace!r}"))
                return
            self.named[key] = spec.actor_id
            self.names.claim(entry)  # schedules it once the name is ours cluster-wide
            return
        self.names.publish_location(entry)
        self._schedule(entry)

    def _arm_sweep(self) -> None:
        if not self.sweeping:
            self.sweeping = True
            self.node.loop.call_later(ACTOR_SWEEP_S, self._sweep)

    def _sweep(self) -> None:
        """Ask again about each actor this node homes and another hosts: one not alive with
        no word from its host for a whole period is forwarded again (the host answers a
        repeat with its state); an alive one's host is asked for its state (a lost report of
        a restart left the owner calling a dead worker). Runs while any actor may need it."""
        self.sweeping = False
        busy = False
        for entry in self.actors.values():
            if entry.state == "dead" or entry.proxy:
                continue
            if not entry.remote:
                busy = busy or entry.state != "alive"  # placing it may forward it
                continue
            busy = True
            aid = entry.spec.actor_id
            if entry.state == "alive":
                self.node.loop.send(entry.remote, m.SubscribeActor(
                    actor_id=aid, subscriber=self.node.mesh_address))
            elif aid in self.quiet:
                self.node.forwarder.resend_actor(entry)
            else:
                self.quiet.add(aid)
        if busy:
            self._arm_sweep()

    def _report(self, entry: ActorEntry, to: str) -> None:
        self.node.loop.send(to, m.ActorState(
            actor_id=entry.spec.actor_id, state=entry.state, address=entry.address,
            error=entry.error, reason=entry.reason, class_name=entry.spec.class_name,
            restarts=entry.restarts, call_address=entry.calls_at(entry.state, entry.address)))

    def schedule(self, entry: ActorEntry) -> None:
        """Place the actor with the scheduler (here, forwarded, or waiting)."""
        self._schedule(entry)

    def host_forwarded(self, spec: m.CreateActor, *, home: str, hops: int, restarts: int) -> None:
        """Another node (its home) forwarded this actor here: place it and report to home."""
        old = self.actors.get(spec.actor_id)
        if old is not None and not old.home and old.remote == home and old.state != "dead":
            # It came back to us, its home (we forwarded it and that node passed it back):
            # place it as home. A second entry with that node as home made the two nodes
            # relay its state to each other forever, and its owner never heard it restarted.
            old.remote = ""
            old.hops = hops
            old.restarts = max(old.restarts, restarts)
            self._schedule(old)
            return
        if old is not None and old.home == home:  # sent again: its home heard nothing back
            self._report(old, home)
            return
        entry = ActorEntry(spec, subscribers={home}, restarts=restarts, home=home, hops=hops)
        self.actors[spec.actor_id] = entry
        self._schedule(entry)

    def _schedule(self, entry: ActorEntry) -> None:
        self._arm_sweep()  # (placing it may forward it)
        spec = entry.spec
        try:
            # The owner applied Ray's defaults (options.actor_resources): {} means zero.
            req = Request(spec.actor_id, "actor", spec.resources,
                          placement_resources=spec.placement,
                          strategy=decode_strategy(spec.strategy), labels=spec.labels,
                          name=spec.class_name, hops=entry.hops)
            decisions = self.node.scheduler.submit(req)
        except Exception as exc:
            self.run(entry, life.Unschedulable(f"it cannot be scheduled: {exc}"))
            return
        self.node.apply(decisions)

    def on_dispatch(self, d: Dispatch) -> None:
        entry = self.actors.get(d.work_id)
        if entry is None or entry.state == "dead":
            self.node.apply(self.node.scheduler.finish(d.work_id))
            return
        gpu_ids = list(d.gpu_ids)
        self.node.take_idle_worker(lambda info: self._start(entry, info, gpu_ids))

    def _start(self, entry: ActorEntry, info: WorkerInfo, gpu_ids: list[int]) -> None:
        if entry.state == "dead":
            self.node.lease_shell.give_back(info)
            return
        info.state = "actor"
        info.actor_id = entry.spec.actor_id
        entry.worker = info
        spec = entry.spec
        env = dict(spec.env_vars)
        if "GPU" in spec.resources or gpu_ids:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpu_ids)
        blob = spec.fn_blob or self.node.functions.get(spec.fn_id, b"")
        self.node.loop.send(info.address, m.CreateActor(
            actor_id=spec.actor_id, owner=spec.owner, fn_id=spec.fn_id,
            class_name=spec.class_name, args=spec.args, resources=spec.resources,
            placement=spec.placement, name=spec.name, namespace=spec.namespace,
            detached=spec.detached, max_restarts=spec.max_restarts,
            max_concurrency=spec.max_concurrency, is_async=spec.is_async, env_vars=env,
            fn_blob=blob, gpu_ids=gpu_ids, restarts=entry.restarts,
            concurrency_groups=spec.concurrency_groups))

    def _on_state_from_worker(self, sender: str, msg: m.ActorState, bufs: list[Any]) -> None:
        entry = self.actors.get(msg.actor_id)
        if entry is None:
            return
        if entry.remote and sender == entry.remote:  # the hosting node reports; pass it on
            self.quiet.discard(msg.actor_id)
            if (msg.state, msg.address, msg.restarts) == (entry.state, entry.address,
                                                          entry.restarts):
                return  # an answer to the sweep's question: nothing changed
            try:
                state = life.ActorState(msg.state)
            except ValueError:
                return
            if msg.state == "alive":
                entry.call_address, entry.call_for = msg.call_address, msg.address
            self.run(entry, life.HostReported(state, msg.address, msg.reason, msg.restarts,
                                              msg.error))
        elif entry.worker is None or sender != entry.worker.address:
            return  # from a worker that died before its report came: a new one is starting
        elif msg.state == "alive":
            entry.call_address, entry.call_for = msg.call_address, msg.address
            self.run(entry, life.Started(msg.address))
        else:  # __init__ raised: dead for good, and its worker goes too
            self.run(entry, life.InitFailed(msg.reason, msg.error))

    def run(self, entry: ActorEntry, event: life.Event) -> None:
        """Feed one event to the actor's lifecycle core and carry out what it decides."""
        for action in entry.life.handle(event):
            match action:
                case life.Publish():
                    entry.restarts = action.restarts
                    self._set_state(entry, action.state.value, address=action.address,
                                    reason=action.reason, error=action.error)
                case life.Schedule():
                    self._schedule(entry)
                case life.StopWorker():
                    if entry.remote:
                        self.node.loop.send(entry.remote, m.KillActor(
                            actor_id=entry.spec.actor_id, no_restart=action.no_restart,
                            reason=action.reason))
                    elif entry.worker is not None:
                        self.node.pool.kill(entry.worker)
                case life.Release():
                    self._release(entry)
                case life.Cancel():
                    self.node.apply(self.node.scheduler.cancel(entry.spec.actor_id))
                case life.FreeName():
                    self._drop_name(entry)
                case _:
                    assert_never(action)

    def _set_state(self, entry: ActorEntry, state: str, *, address: str = "", reason: str = "",
                   error: bytes = b"") -> None:
        entry.state = state
        entry.address = address
        entry.reason = reason or entry.reason
        entry.error = error or entry.error  # (a later subscriber hears what __init__ raised)
        msg = m.ActorState(actor_id=entry.spec.actor_id, state=state, address=address,
                           error=entry.error, reason=entry.reason,
                           class_name=entry.spec.class_name, restarts=entry.restarts,
                           call_address=entry.calls_at(state, address))
        for sub in entry.subscribers:
            self.node.loop.send(sub, msg)
        if state == "dead":
            self._drop_name(entry)
        if state == "dead" and not entry.home and not entry.proxy:
            self.names.record_death(entry)

    def _drop_name(self, entry: ActorEntry) -> None:
        """Free the actor's name (if it still holds it)."""
        if not entry.spec.name:
            return
        key = (entry.spec.namespace, entry.spec.name)
        if self.named.get(key) == entry.spec.actor_id:
            del self.named[key]
            if not entry.home:
                self.names.release_name(entry)

    def _release(self, entry: ActorEntry) -> None:
        self.node.apply(self.node.scheduler.finish(entry.spec.actor_id))

    # -- death and restarts ----------------------------------------------------------------
    def _on_kill(self, sender: str, msg: m.KillActor, bufs: list[Any]) -> None:
        entry = self.actors.get(msg.actor_id)
        if entry is None:  # homed elsewhere, and no handle here has followed it yet
            self.names.forward_kill(msg)
            return
        if entry.state == "dead":
            return
        why = msg.reason or "it was killed by zmesh.kill()"
        self.run(entry, life.KillRequested(why, msg.no_restart,
                                           reachable=_reachable(entry)))

    def worker_died(self, info: WorkerInfo, reason: str) -> None:
        entry = self.actors.get(info.actor_id)
        self.owner_died(info.address)
        if entry is None or entry.state == "dead":
            return
        entry.worker = None
        self.run(entry, life.Lost(reason, here=True, stopping=self.node.stopping))

    def owner_died(self, owner: str) -> None:
        """Actors and placement groups die with their owner unless detached."""
        for group in [g for g in self.groups.values() if g.owner == owner and not g.detached]:
            self._remove_pg(bytes.fromhex(group.pg_id))
        for entry in list(self.actors.values()):
            if entry.spec.owner == owner and not entry.spec.detached and entry.state != "dead":
                self.run(entry, life.KillRequested("its owner died", True,
                                                   reachable=_reachable(entry)))
            entry.subscribers.discard(owner)

    def node_gone(self, node_id: str, address: str, why: str) -> None:
        """A node died or left: restart the actors it hosted for us, or fail them."""
        for entry in list(self.actors.values()):
            if entry.state == "dead":
                continue
            if entry.proxy:
                if entry.remote == address:
                    self.names.home_gone(entry)
                continue
            if entry.remote == address:
                entry.remote = ""
                entry.worker = None
                entry.hops = 0
                self.run(entry, life.Lost(f"its node {node_id} {why}", here=False,
                                          stopping=self.node.stopping))
            elif entry.home == address:
                # Its home (and owner) went: a detached actor lives on with us as its home.
                entry.subscribers.discard(address)
                entry.home = ""
                if entry.spec.detached:
                    self.names.publish_location(entry)  # handles elsewhere follow it here
                if not entry.spec.detached:
                    self.run(entry, life.KillRequested(f"its owner's node {node_id} {why}", True,
                                                       reachable=entry.worker is not None))

    def fence(self) -> None:
        """The mesh declared this node dead (`Node._fence`): every home that had an actor
        hosted here handled the death already (restarted the actor elsewhere, or failed
        it). Forget those actors here, without a word to the home and without a restart:
        the fence stops their workers, and a second incarnation started here would answer
        next to the home's (the home ignores its reports). Their resources go back now."""
        for actor_id, entry in list(self.actors.items()):
            if not entry.home or entry.state == "dead":
                continue
            del self.actors[actor_id]
            self.quiet.discard(actor_id)
            entry.state = "dead"  # (a start already under way gives its worker back)
            entry.worker = None
            key = (entry.spec.namespace, entry.spec.name)
            if entry.spec.name and self.named.get(key) == actor_id:
                del self.named[key]
            self.node.apply(self.node.scheduler.cancel(actor_id))

    def on_failed(self, d: Failed) -> None:
        entry = self.actors.get(d.work_id)
        if entry is not None:
            self.run(entry, life.Unschedulable(str(d.error)))

    def owner_of(self, work_id: bytes) -> str | None:
        entry = self.actors.get(work_id)
        return entry.spec.owner if entry is not None else None

    def name_of(self, work_id: bytes) -> str:
        entry = self.actors.get(work_id)
        return f"actor {entry.spec.class_name}" if entry is not None else "work"

    # -- lookups ---------------------------------------------------------------------------
    def _on_subscribe(self, sender: str, msg: m.SubscribeActor, bufs: list[Any]) -> None:
        entry = self.actors.get(msg.actor_id)
        if entry is None and self.names.follow(msg.actor_id, msg.subscriber):
            return
        if entry is None:
            early = self.early_subscribers.setdefault(msg.actor_id, set())
            if not early:
                self.node.loop.call_later(UNKNOWN_ACTOR_GRACE_S,
                                          lambda: self._still_unknown(msg.actor_id))
            early.add(msg.subscriber)
            return
        entry.subscribers.add(msg.subscriber)
        self.node.loop.send(msg.subscriber, m.ActorState(
            actor_id=msg.actor_id, state=entry.state, address=entry.address, error=entry.error,
            reason=entry.reason, class_name=entry.spec.class_name, restarts=entry.restarts,
            call_address=entry.calls_at(entry.state, entry.address)))

    def _still_unknown(self, actor_id: bytes) -> None:
        for subscriber in self.early_subscribers.pop(actor_id, set()):
            self.node.loop.send(subscriber, m.ActorState(
                actor_id=actor_id, state="dead", reason="no node knows this actor"))

    def _on_get_named(self, sender: str, msg: m.GetNamedActor, bufs: list[Any]) -> None:
        entry = self.actors.get(self.named.get((msg.namespace, msg.name), b""))
        if entry is None or entry.state == "dead":
            self.names.lookup(sender, msg)  # maybe named through another node
            return
        self.node.loop.send(sender, m.NamedActorReply(
            request_id=msg.request_id, found=True, actor_id=entry.spec.actor_id,
            class_name=entry.spec.class_name, address=entry.address, state=entry.state,
            fn_id=entry.spec.fn_id, is_async=entry.spec.is_async, owner=entry.spec.owner,
            detached=entry.spec.detached, max_pending_calls=entry.spec.max_pending_calls,
            max_concurrency=entry.spec.max_concurrency, methods=entry.spec.methods,
            max_task_retries=entry.spec.max_task_retries, method_opts=entry.spec.method_opts))

    # -- placement groups ------------------------------------------------------------------
    def _on_create_pg(self, sender: str, msg: m.CreatePlacementGroup, bufs: list[Any]) -> None:
        pg_id = msg.pg_id.hex()
        self.groups[pg_id] = GroupEntry(pg_id, msg.bundles, msg.strategy, msg.name, msg.owner,
                                        detached=msg.detached)
        try:
            decisions = self.node.scheduler.create_placement_group(pg_id, msg.bundles,
                                                                   msg.strategy, msg.name)
        except Exception as exc:
            self._pg_state(self.groups[pg_id], "failed", str(exc))
            return
        self.node.apply(decisions)

    def on_decision(self, d: Any) -> None:
        if isinstance(d, PGReady):
            group = self.groups.get(d.pg_id)
            if group is not None:
                group.ready_at = group.ready_at or group_table.now()
                self._pg_state(group, "ready", "")
        elif isinstance(d, PGRescheduling):
            group = self.groups.get(d.pg_id)
            if group is not None:
                group.attempts += 1
                self._pg_state(group, "rescheduling", d.reason)
        elif isinstance(d, PGPending | PGInfeasible):
            group = self.groups.get(d.pg_id)
            if group is not None and group.reason != d.reason:
                group.attempts += 1
                self._pg_state(group, "pending", d.reason)
                if isinstance(d, PGInfeasible):
                    self.node.warn(group.owner, f"placement group {group.name or d.pg_id}",
                                   f"placement group {group.name or d.pg_id!r} cannot be "
                                   f"placed: {d.reason}")
        elif isinstance(d, PGRemoved):
            self._forget_pg(self.groups.pop(d.pg_id, None))
            for wid in d.affected_work_ids:
                self._evict(wid)

    def evict(self, work_id: bytes) -> None:
        """Kill the work (an actor or a lease) running in a bundle that was given back."""
        self._evict(work_id)

    def _evict(self, work_id: bytes) -> None:
        entry = self.actors.get(work_id)
        if entry is not None:
            self.run(entry, life.KillRequested("its placement group was removed", True,
                                               reachable=_reachable(entry)))
            return
        self.node.lease_shell.handle(nl.LeaseEvicted(work_id))

    def _pg_state(self, group: GroupEntry, state: str, reason: str) -> None:
        group.state = state
        group.reason = reason
        if group.owner:
            self.node.loop.send(group.owner, m.PlacementGroupState(
                pg_id=bytes.fromhex(group.pg_id), state=state, reason=reason))

    def _remove_pg(self, pg_id_bytes: bytes) -> None:
        pg_id = pg_id_bytes.hex()
        group = self.groups.pop(pg_id, None)
        if group is None:  # made through another node: its coordinator frees it everywhere
            for address in self.node.groups.live_peers():
                self.node.loop.send(address, ReleaseBundles(pg_id=pg_id))
            return
        group.state = "removed"
        self._forget_pg(group)
        self.node.apply(self.node.scheduler.remove_placement_group(pg_id))

    def _forget_pg(self, group: GroupEntry | None) -> None:
        if group is not None:
            self.removed_groups.add(group_table.row(group, None, "REMOVED"))

    def answer(self, what: str, arg: bytes) -> Any:
        if what in ("placement_groups", "placement_groups_local"):
            nodes = {i.pg_id: i.nodes for i in self.node.scheduler.placement_groups()}
            table = dict(self.removed_groups.rows)
            table.update((g.pg_id, group_table.row(g, nodes.get(g.pg_id)))
                         for g in self.groups.values())
            return table
        if what == "actors":
            # every node that knows an actor lists it; `hosted` marks the row of the node that
            # runs it, so that tools show each actor once
            node_id = self.node.node_id
            return {e.spec.actor_id.hex(): {"class_name": e.spec.class_name, "state": e.state,
                                            "name": e.spec.name, "restarts": e.restarts,
                                            "hosted": not e.proxy and not e.remote,
                                            "namespace": e.spec.namespace,
                                            "pid": e.worker.pid if e.worker else 0,
                                            "detached": e.spec.detached,
                                            "running_on": node_id if e.worker else ""}
                    for e in self.actors.values()}
        raise KeyError(f"unknown query {what!r}")


def _reachable(entry: ActorEntry) -> bool:
    """A worker here, or a hosting node, can be told to stop the actor."""
    return bool(entry.remote) or entry.worker is not None
