"""Named actors and actor locations cluster-wide, kept in the control store.

`named/<ns>/<name>` is claimed put-if-absent by the actor's home node, so a name is unique
across the mesh and `get_actor` works from a driver on any node; `actor/<id>` names the
home node, which knows where the actor runs now (it follows restarts), and once the actor
died, why (for the home's latest DEAD_ACTORS_KEPT dead). A node asked about an actor homed
elsewhere keeps a proxy entry subscribed to the home and relays its states.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from zmesh.core.actor_lifecycle import Unschedulable
from zmesh.protocol.messages import runtime as m
from zmesh.runtime.node.actor_entries import ActorEntry
from zmesh.runtime.node.control import actor_key, named_key
from zmesh.store.control_requests import Completion
from zmesh.store.control_store import KvStatus

if TYPE_CHECKING:
    from zmesh.runtime.node.actors import ActorManager

logger = logging.getLogger("zmesh.node")

REFOLLOW_DELAY_S = 1.0
"""After a proxied actor's home dies, wait this long for its host to publish itself."""
FOLLOW_RETRY_S = 0.05
FOLLOW_RETRY_MAX_S = 1.0
"""A location not found yet is asked for again after FOLLOW_RETRY_S, doubling up to this."""
DEAD_ACTORS_KEPT = 10_000
"""A home node keeps this many of its dead actors (the latest): their entries, and their
`actor/<id>` records that say why they died. Older ones are forgotten (a later handle to one
hears only that no node knows it)."""


class ActorDirectory:
    """The store side of the node's actors (loop thread only)."""

    def __init__(self, actors: ActorManager) -> None:
        self.actors = actors
        self.node = actors.node
        self.looking: set[bytes] = set()  # actors whose location is asked for again soon
        self.dead: OrderedDict[bytes, None] = OrderedDict()  # recorded dead, oldest first

    # -- the home node's writes ------------------------------------------------------------
    def claim(self, entry: ActorEntry) -> None:
        """Take the actor's name cluster-wide, then schedule it; dead if the name is taken."""
        spec = entry.spec
        record = {"actor_id": spec.actor_id, "home": self.node.mesh_address,
                  "class_name": spec.class_name, "fn_id": spec.fn_id, "is_async": spec.is_async,
                  "owner": spec.owner, "detached": spec.detached,
                  "max_pending_calls": spec.max_pending_calls,
                  "max_concurrency": spec.max_concurrency, "methods": spec.methods,
                  "max_task_retries": spec.max_task_retries, "method_opts": spec.method_opts}
        key = named_key(spec.namespace, spec.name)

        def done(c: Completion, retried: bool = False) -> None:
            if entry.state == "dead":
                return
            holder = self.node.control.decode(c)
            if c.status == KvStatus.OK or (holder and holder["actor_id"] == spec.actor_id):
                self.publish_location(entry)
                self.actors.schedule(entry)
            elif holder and not retried and not self._home_alive(holder["home"]):
                # the node that held the name died with its actor: the name is free again
                self.node.control.put(key, record, lambda c2: done(c2, True))
            elif c.status == KvStatus.EXISTS:
                self.actors.run(entry, Unschedulable(
                    f"the name {spec.name!r} is already taken in namespace {spec.namespace!r}"))
            else:
                self.actors.run(entry, Unschedulable(
                    f"the name {spec.name!r} could not be registered: {c.status.name}"))

        self.node.control.put(key, record, done, if_absent=True)

    def publish_location(self, entry: ActorEntry) -> None:
        """Record this node as the actor's home (fire and forget)."""
        self.node.control.put(actor_key(entry.spec.actor_id), {"home": self.node.mesh_address})

    def release_name(self, entry: ActorEntry) -> None:
        self.node.control.delete(named_key(entry.spec.namespace, entry.spec.name))

    def record_death(self, entry: ActorEntry) -> None:
        """The actor (homed here) died: its `actor/<id>` record now says why, so a handle on
        another node that asks after the death hears the real cause (killed, its process
        exited, its node died, its constructor raised...), not "no node knows this actor";
        the record outlives this node. The latest DEAD_ACTORS_KEPT are kept, records and
        entries; an older one goes from both."""
        spec = entry.spec
        self.node.control.put(actor_key(spec.actor_id), {
            "home": self.node.mesh_address, "dead": True, "reason": entry.reason,
            "error": entry.error, "class_name": spec.class_name, "restarts": entry.restarts})
        self.dead[spec.actor_id] = None
        self.dead.move_to_end(spec.actor_id)
        while len(self.dead) > DEAD_ACTORS_KEPT:
            old, _ = self.dead.popitem(last=False)
            self.node.control.delete(actor_key(old))
            gone = self.actors.actors.get(old)
            if gone is not None and gone.state == "dead":
                del self.actors.actors[old]

    @staticmethod
    def _dead_record(holder: Any) -> dict[str, Any] | None:
        """The record, if it is a dead actor's (see `record_death`)."""
        return holder if isinstance(holder, dict) and holder.get("dead") else None

    def tell_dead(self, actor_id: bytes, subscribers: set[str], record: dict[str, Any]) -> None:
        """Tell `subscribers` the actor is dead, and why, as its dead record says."""
        msg = m.ActorState(actor_id=actor_id, state="dead", reason=str(record.get("reason", "")),
                           error=bytes(record.get("error") or b""),
                           class_name=str(record.get("class_name", "")),
                           restarts=int(record.get("restarts", 0)))
        for sub in subscribers:
            self.node.loop.send(sub, msg)

    # -- other nodes' lookups --------------------------------------------------------------
    def lookup(self, sender: str, msg: m.GetNamedActor) -> None:
        """Answer GetNamedActor from the store (the name is not homed here)."""
        def done(c: Completion) -> None:
            holder = self.node.control.decode(c)
            if holder is None or not self._home_alive(holder["home"]):
                self.node.loop.send(sender, m.NamedActorReply(request_id=msg.request_id,
                                                              found=False))
                return
            self.node.loop.send(sender, m.NamedActorReply(
                request_id=msg.request_id, found=True, actor_id=holder["actor_id"],
                class_name=holder["class_name"], state="pending", fn_id=holder["fn_id"],
                is_async=holder["is_async"], owner=holder.get("owner", ""),
                detached=holder.get("detached", True),
                max_pending_calls=holder.get("max_pending_calls", -1),
                max_concurrency=holder.get("max_concurrency", 1),
                methods=holder.get("methods") or {},
                max_task_retries=holder.get("max_task_retries", 0),
                method_opts=holder.get("method_opts") or b""))

        self.node.control.get(named_key(msg.namespace, msg.name), done)

    def follow(self, actor_id: bytes, subscriber: str) -> bool:
        """Subscribe `subscriber` through a proxy if the actor is homed on another node.

        False (synchronously) when the store has no location for it yet: the caller then
        holds the subscriber as an early one, and the store is asked again (see
        `_look_again`) until the record shows up, a CreateActor comes, or the grace ends.
        A single-node mesh answers at once.
        """
        answered: list[bool] = []

        def done(c: Completion) -> None:
            dead = self._dead_record(self.node.control.decode(c))
            if dead is not None:  # died: say why, to it and to any other waiting here
                answered.append(True)
                self.tell_dead(actor_id, {subscriber} | self.actors.early_subscribers.pop(
                    actor_id, set()), dead)
                return
            home = self._live_home(c)
            if home is None:
                answered.append(False)
                self._look_again(actor_id)
                return
            answered.append(True)
            self._proxy(actor_id, home, subscriber)

        self.node.control.get(actor_key(actor_id), done)
        if answered:
            return answered[0]
        # Remote shard: the answer comes later; hold the subscriber as an early one meanwhile.
        return False

    def _look_again(self, actor_id: bytes, delay: float = FOLLOW_RETRY_S) -> None:
        """No live location for an actor a handle here asks about: not a verdict. The
        actor's home publishes it fire-and-forget when the creator's CreateActor lands, and
        that put can reach the record's shard after our get does (they come from different
        nodes), or the creator's node may not have had the CreateActor yet. Ask the store
        again, backing off, while subscribers still wait for it here; the grace timer
        (UNKNOWN_ACTOR_GRACE_S) still ends the wait for an actor no node knows."""
        if actor_id in self.looking:
            return
        self.looking.add(actor_id)

        def again() -> None:
            self.looking.discard(actor_id)
            if not self._waiting(actor_id):
                return

            def done(c: Completion) -> None:
                home = self._live_home(c)
                if not self._waiting(actor_id):
                    return
                dead = self._dead_record(self.node.control.decode(c))
                if dead is not None:
                    self.tell_dead(actor_id, self.actors.early_subscribers.pop(actor_id, set()),
                                   dead)
                    return
                early = self.actors.early_subscribers.get(actor_id)
                if home is None or not early:
                    self._look_again(actor_id, min(delay * 2, FOLLOW_RETRY_MAX_S))
                    return
                self._proxy(actor_id, home, next(iter(early)))

            self.node.control.get(actor_key(actor_id), done)

        self.node.loop.call_later(delay, again)

    def _waiting(self, actor_id: bytes) -> bool:
        """Subscribers here still wait for the actor, and nothing here knows it yet."""
        return (actor_id in self.actors.early_subscribers
                and actor_id not in self.actors.actors)

    def _live_home(self, c: Completion) -> str | None:
        """The other, live node a location record names as the actor's home, if any."""
        holder = self.node.control.decode(c)
        home = holder["home"] if holder and not self._dead_record(holder) else ""
        if not home or home == self.node.mesh_address or not self._home_alive(home):
            return None
        return str(home)

    def forward_kill(self, msg: m.KillActor) -> None:
        """Pass a kill for an actor this node does not know on to its home, if it has one
        on another live node (a kill through a handle never used here was dropped)."""
        def done(c: Completion) -> None:
            holder = self.node.control.decode(c)
            home = holder["home"] if holder and not self._dead_record(holder) else ""
            if home and home != self.node.mesh_address and self._home_alive(home):
                self.node.loop.send(home, msg)

        self.node.control.get(actor_key(msg.actor_id), done)

    def _proxy(self, actor_id: bytes, home: str, subscriber: str) -> None:
        entry = self.actors.actors.get(actor_id)
        if entry is None or (entry.proxy and entry.state == "dead"):
            spec = m.CreateActor(actor_id=actor_id, owner="", fn_id=b"", class_name="",
                                 args=m.Args(), resources={}, placement={})
            entry = ActorEntry(spec, remote=home, proxy=True)
            self.actors.actors[actor_id] = entry
        entry.subscribers.add(subscriber)
        entry.subscribers |= self.actors.early_subscribers.pop(actor_id, set())
        if entry.proxy:
            entry.remote = home
            self.node.loop.send(home, m.SubscribeActor(actor_id=actor_id,
                                                       subscriber=self.node.mesh_address))

    def home_gone(self, entry: ActorEntry) -> None:
        """A proxied actor's home died: a detached actor's host republishes; follow it."""
        actor_id = entry.spec.actor_id
        self.actors.actors.pop(actor_id, None)
        subscribers = set(entry.subscribers)

        def refollow() -> None:
            def done(c: Completion) -> None:
                holder = self.node.control.decode(c)
                dead = self._dead_record(holder)
                if dead is not None:  # it died (its host, home now, recorded why)
                    self.tell_dead(actor_id, subscribers, dead)
                    return
                home = holder["home"] if holder else ""
                if home and home != entry.remote and self._home_alive(home):
                    for sub in subscribers:
                        self._proxy(actor_id, home, sub)
                    return
                for sub in subscribers:
                    self.node.loop.send(sub, m.ActorState(
                        actor_id=actor_id, state="dead",
                        reason=f"its home node {entry.remote} is gone"))

            self.node.control.get(actor_key(actor_id), done)

        self.node.loop.call_later(REFOLLOW_DELAY_S, refollow)

    def _home_alive(self, home: str) -> bool:
        if home == self.node.mesh_address:
            return True
        mesh = self.node.mesh
        if mesh is None:
            return False
        node_id = mesh.node_of.get(home)
        return node_id is not None and mesh.live_address(node_id) is not None
