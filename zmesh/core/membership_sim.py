"""Membership meshes on SimNet, for tests and `benchmarks/bench_membership.py`.

Two ways to get a mesh: `grow_mesh` joins the nodes one by one through a seed (the real
path), `settled_mesh` starts them already knowing each other (fast at 1,000 nodes).
"""

from __future__ import annotations

import random

from zmesh.core.membership import MemberEventKind, Membership
from zmesh.core.membership_types import MembershipConfig
from zmesh.protocol.messages.membership import MemberState, MemberUpdate, Metadata
from zmesh.testing.simnet import SimNet

__all__ = ["add_member", "grow_mesh", "settled_mesh", "first_event_times", "live_views"]


def add_member(
    net: SimNet,
    address: str,
    *,
    seed: int,
    config: MembershipConfig | None = None,
    join: list[str] | None = None,
) -> Membership:
    """Add one member to `net` (seeded from `seed`), joining through `join` if given."""
    node = Membership(address, config=config, rng=random.Random(f"{seed}/{address}"))
    net.add(address, node)
    if join:
        for dest, message in node.join(net.now, join):
            net.inject(dest, address, message)
    return node


def grow_mesh(
    net: SimNet,
    n: int,
    *,
    seed: int = 0,
    config: MembershipConfig | None = None,
    gap: float = 0.05,
    settle: float = 3.0,
) -> dict[str, Membership]:
    """n members named m0..m{n-1}, each joining through m0 `gap` seconds after the last."""
    nodes: dict[str, Membership] = {}
    for i in range(n):
        address = f"m{i}"
        nodes[address] = add_member(
            net, address, seed=seed, config=config, join=["m0"] if i else None
        )
        net.run_for(gap)
    net.run_for(settle)
    return nodes


def settled_mesh(
    net: SimNet,
    n: int,
    *,
    seed: int = 0,
    config: MembershipConfig | None = None,
) -> dict[str, Membership]:
    """n members named m0..m{n-1} that start out knowing each other, as after a long run."""
    records = [MemberUpdate(f"m{i}", MemberState.ALIVE, 0, Metadata()) for i in range(n)]
    nodes: dict[str, Membership] = {}
    for i in range(n):
        address = f"m{i}"
        node = add_member(net, address, seed=seed, config=config)
        node.preload(net.now, records)
        nodes[address] = node
    return nodes


def first_event_times(
    nodes: dict[str, Membership],
    about: str,
    kinds: tuple[MemberEventKind, ...],
    seen: dict[str, float],
) -> dict[str, float]:
    """Drain every node's events and record in `seen` when each first had one of `kinds`
    about `about`; returns `seen`."""
    for address, node in nodes.items():
        for event in node.drain_events():
            if event.address == about and event.kind in kinds and address not in seen:
                seen[address] = event.at
    return seen


def live_views(nodes: dict[str, Membership], among: list[str]) -> dict[str, list[str]]:
    """Each listed node's sorted list of live members (its view of the mesh)."""
    return {a: nodes[a].live_members() for a in among}
