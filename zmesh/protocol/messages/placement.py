"""Node-to-node placement messages (tags 120-139): work one node forwards to another.

A lease request or actor that does not fit on its caller's node travels to a node whose
gossiped free resources fit. The receiving node grants the lease or starts the actor and
answers the owner directly; it keeps the forwarding node (the lease's `origin`, the actor's
home) informed so that node can route returns, kills and lookups, and act when it dies.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from zmesh.protocol.messages.base import Message
from zmesh.protocol.messages.runtime import CreateActor, RequestLease

__all__ = ["ForwardLease", "ForwardedLeaseState", "ForwardActor", "PrepareBundles",
           "BundlesReserved", "CommitBundles", "AbortBundles", "ReleaseBundles",
           "LookupGroup", "GroupLayout", "PLACEMENT_MESSAGES"]

NonNegative = Annotated[int, msgspec.Meta(ge=0)]


class ForwardLease(Message, tag=120):
    """Grant this lease to `request.owner` if it fits here (or forward it on).

    `lease_id` was chosen by the origin node, so every node on the way names it the same.
    """

    lease_id: bytes
    origin: str
    request: RequestLease
    hops: NonNegative = 0


class ForwardedLeaseState(Message, tag=121):
    """To the origin of a forwarded lease: it was `granted` on the sender, or is `done`;
    `unknown` answers a repeated ForwardLease the sender has no record of (the origin places
    it again; an older origin takes it for `done`)."""

    lease_id: bytes
    state: str
    worker_address: str = ""


class ForwardActor(Message, tag=122):
    """Place and start this actor here (or forward it on); the sender is its home node.

    The new node reports every state change to the home node with `ActorState`; the home
    node tells the owner and every subscriber, and answers lookups by name.
    """

    spec: CreateActor
    hops: NonNegative = 0
    restarts: NonNegative = 0


class PrepareBundles(Message, tag=123):
    """From a group's coordinating node: reserve (uncommitted) these bundles of `pg_id` here.

    `bundles` maps bundle index -> amounts. The answer is `BundlesReserved` with `attempt`.
    """

    pg_id: str
    attempt: NonNegative
    bundles: dict[int, dict[str, float]]


class BundlesReserved(Message, tag=124):
    """To the coordinator: this node (`node_id`) did (`ok`) or could not reserve its part."""

    pg_id: str
    node_id: str
    attempt: NonNegative
    ok: bool
    reason: str = ""


class CommitBundles(Message, tag=125):
    """Every node prepared: the reservations here are usable; bundle i lives on nodes[i]."""

    pg_id: str
    nodes: list[str]
    bundles: list[dict[str, float]]


class AbortBundles(Message, tag=126):
    """The coordinator gave up this attempt: release what was prepared here for `pg_id`."""

    pg_id: str


class ReleaseBundles(Message, tag=127):
    """The group was removed: release its bundles here and stop the work running in them."""

    pg_id: str


class BundlesLost(Message, tag=130):
    """Holder -> coordinator: I released my bundles of this group while I took you for
    dead, and you answer again: place them again (you may still count them as held here)."""

    pg_id: str
    node_id: str


class LookupGroup(Message, tag=128):
    """Where do the bundles of `pg_id` live? Answered by its coordinator with `GroupLayout`."""

    pg_id: str


class GroupLayout(Message, tag=129):
    """Bundle i of `pg_id` lives on nodes[i] (state `ready`), or the group was `removed`:
    by its coordinator (`coordinator` empty), or so the sender concluded when it took the
    coordinator at address `coordinator` for dead."""

    pg_id: str
    state: str
    nodes: list[str] = []
    bundles: list[dict[str, float]] = []
    coordinator: str = ""


PLACEMENT_MESSAGES: tuple[type[Message], ...] = (
    ForwardLease, ForwardedLeaseState, ForwardActor, PrepareBundles, BundlesReserved,
    CommitBundles, AbortBundles, ReleaseBundles, LookupGroup, GroupLayout)
