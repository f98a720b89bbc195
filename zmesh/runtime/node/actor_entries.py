"""What a node records per actor and per placement group it manages."""

from __future__ import annotations

from dataclasses import dataclass, field

from zmesh.protocol.messages import runtime as m
from zmesh.runtime.node import group_table
from zmesh.runtime.node.worker_pool import WorkerInfo


@dataclass(eq=False)
class ActorEntry:
    spec: m.CreateActor
    state: str = "pending"
    worker: WorkerInfo | None = None
    address: str = ""
    subscribers: set[str] = field(default_factory=set)
    restarts: int = 0
    no_restart: bool = False
    error: bytes = b""
    reason: str = ""
    kill_reason: str = ""  # why this node killed its worker, which then names the death
    remote: str = ""  # the node hosting it, while this node is its home
    home: str = ""  # its home node, while this node hosts it for that one
    hops: int = 0
    proxy: bool = False  # a stand-in for an actor homed on another node (remote is its home)


@dataclass(eq=False)
class GroupEntry:
    pg_id: str
    bundles: list[dict[str, float]]
    strategy: str
    name: str
    owner: str
    state: str = "pending"
    reason: str = ""
    detached: bool = False
    created_at: float = field(default_factory=group_table.now)
    ready_at: float = 0.0
    attempts: int = 1
