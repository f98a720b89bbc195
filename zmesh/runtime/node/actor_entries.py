"""What a node records per actor and per placement group it manages."""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

from zmesh.core.actor_lifecycle import ActorLifecycle
from zmesh.protocol.messages import runtime as m
from zmesh.runtime.node import group_table
from zmesh.runtime.node.worker_pool import WorkerInfo


@dataclass(eq=False)
class ActorEntry:
    """An actor this node manages: its lifecycle core (the rules) and where it runs. `state`,
    `address`, `reason`, `error` and `restarts` are what was last published."""

    def calls_at(self, state: str, address: str) -> str:
        """The call address to publish with (state, address): '' unless the worker alive at
        `address` reported one."""
        return self.call_address if state == "alive" and address == self.call_for else ""

    spec: m.CreateActor
    state: str = "pending"
    worker: WorkerInfo | None = None
    address: str = ""
    subscribers: set[str] = field(default_factory=set)
    restarts: int = 0
    error: bytes = b""
    reason: str = ""
    remote: str = ""  # the node hosting it, while this node is its home
    home: str = ""  # its home node, while this node hosts it for that one
    hops: int = 0
    proxy: bool = False  # a stand-in for an actor homed on another node (remote is its home)
    # where the worker at `call_for` takes calls (ActorState.call_address), published with
    # "alive" at that address only: never an older incarnation's
    call_address: str = ""
    call_for: str = ""
    life: ActorLifecycle = field(init=False)

    def __post_init__(self) -> None:
        self.life = ActorLifecycle(self.spec.max_restarts, self.restarts)


class GroupEntry(msgspec.Struct, eq=False, dict=True):
    pg_id: str
    bundles: list[dict[str, float]]
    strategy: str
    name: str
    owner: str
    state: str = "pending"
    reason: str = ""
    detached: bool = False
    created_at: float = msgspec.field(default_factory=group_table.now)
    ready_at: float = 0.0
    attempts: int = 1
