"""Hypothesis strategies for fault plans and fault timing, built to shrink well.

Hypothesis shrinks a failing plan toward fewer faults (the list shrinks), earlier faults
(times are integer ticks that shrink to 0), lower node numbers, shorter faults and the
simplest kinds (the first kind enabled is the simplest: kills before pauses before
partitions before link faults). So the plan a failing test prints is close to minimal:

    @given(plan=fault_plans(kill_actors=True, partitions=True, drop=0.05))
    def test_counter(plan): ...
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from zmesh.testing.faults import (
    Fault,
    FaultPlan,
    KillActor,
    KillNode,
    KillOwner,
    KillWorker,
    LinkFault,
    Partition,
    Pause,
    SlowNode,
    Unit,
)

__all__ = ["fault_plans", "fault_times", "fault_steps"]

# Set by the pytest plugin's --zmesh-plan: every fault_plans() draws exactly this plan.
REPLAY_PLAN: FaultPlan | None = None


def fault_times(horizon: float = 10.0, resolution: float = 0.1) -> st.SearchStrategy[float]:
    """A time within [0, horizon] seconds, in `resolution` ticks; shrinks to 0 (earliest)."""
    if horizon < 0 or resolution <= 0:
        raise ValueError(f"fault_times needs horizon >= 0 and resolution > 0, got "
                         f"{horizon}, {resolution}")
    ticks = int(horizon / resolution)
    return st.integers(0, ticks).map(lambda t: round(t * resolution, 9))


def fault_steps(steps: int) -> st.SearchStrategy[float]:
    """The step (index of the program's operation) before which a fault fires; shrinks to 0."""
    if steps < 1:
        raise ValueError(f"fault_steps needs steps >= 1, got {steps}")
    return st.integers(0, steps - 1).map(float)


def fault_plans(*, nodes: int = 3, kill_workers: bool = False, kill_actors: bool = False,
                kill_nodes: bool = False, kill_owners: bool = False, pauses: bool = False,
                partitions: bool = False, drop: float = 0.0, duplicate: float = 0.0,
                delay: float = 0.0, reorder: float = 0.0, slow_nodes: bool = False,
                min_faults: int = 0, max_faults: int = 6, horizon: float = 10.0, steps: int | None = None,
                actors: tuple[str, ...] = (), owners: tuple[str, ...] = (),
                max_duration: float | None = None,
                seed: st.SearchStrategy[int] | None = None) -> st.SearchStrategy[FaultPlan]:
    """Plans of `min_faults` to `max_faults` faults over `horizon` seconds (or `steps` steps).

    Each flag enables one kind of fault. `drop`, `duplicate`, `reorder` are the rates of link
    faults (0 disables them); `delay` is the added latency in seconds. Kill nodes never kill
    node 0 (the head, where the driver is); `actors`/`owners` name the victims to pick from
    (empty: any). `max_duration` bounds pauses, partitions and link faults (default: the
    horizon).
    """
    if nodes < 1:
        raise ValueError(f"fault_plans needs nodes >= 1, got {nodes}")
    if REPLAY_PLAN is not None:
        return st.just(REPLAY_PLAN)
    unit: Unit = "s" if steps is None else "step"
    span = horizon if steps is None else float(steps)
    tick = horizon / 100 if horizon > 0 else 0.1  # 100 instants over the horizon
    when = fault_times(horizon, tick) if steps is None else fault_steps(steps)
    longest = max_duration if max_duration is not None else span
    lasting = (fault_times(longest, tick) if steps is None
               else fault_steps(max(1, int(longest)))) \
        .map(lambda d: round(d + (tick if steps is None else 1.0), 9))
    node = st.integers(0, nodes - 1)
    kinds: list[st.SearchStrategy[Fault]] = []
    if kill_workers:
        kinds.append(st.builds(KillWorker, at=when, node=st.none() | node))
    if kill_actors:
        name = st.sampled_from(actors) if actors else st.none()
        kinds.append(st.builds(KillActor, at=when, name=name))
    if kill_nodes and nodes > 1:
        kinds.append(st.builds(KillNode, at=when, node=st.integers(1, nodes - 1)))
    if kill_owners:
        name = st.sampled_from(owners) if owners else st.none()
        kinds.append(st.builds(KillOwner, at=when, name=name))
    if pauses:
        kinds.append(st.builds(Pause, at=when, node=node, duration=lasting))
    if partitions and nodes > 1:
        side = st.lists(st.integers(0, nodes - 1), min_size=1, max_size=nodes - 1,
                        unique=True).map(lambda s: tuple(sorted(s)))
        kinds.append(st.builds(Partition, at=when, side=side, duration=lasting))
    for kind, rate in (("drop", drop), ("duplicate", duplicate), ("reorder", reorder)):
        if rate > 0:
            kinds.append(_link(kind, rate, when, lasting, nodes))
    if delay > 0:
        kinds.append(_link("delay", 0.5, when, lasting, nodes, delay))
    if slow_nodes:
        kinds.append(st.builds(SlowNode, at=when, node=node, duration=lasting))
    if not kinds:
        raise ValueError("fault_plans() with no fault enabled: pass kill_workers=True, "
                         "partitions=True, drop=0.05, ...")
    faults = st.lists(st.one_of(kinds), min_size=min_faults, max_size=max_faults)
    seeds = seed if seed is not None else st.integers(0, 2**32 - 1)
    return st.builds(_plan, seeds, st.just(nodes), faults, st.just(unit))


def _link(kind: str, rate: float, when: st.SearchStrategy[float],
          lasting: st.SearchStrategy[float], nodes: int,
          delay: float = 0.05) -> st.SearchStrategy[Fault]:
    between = st.none() | st.lists(st.integers(0, nodes - 1), min_size=1, max_size=nodes,
                                   unique=True).map(lambda s: tuple(sorted(s)))
    return st.builds(LinkFault, at=when, kind=st.just(kind), rate=st.just(rate),
                     duration=lasting, between=between, delay=st.just(delay))


def _plan(seed: int, nodes: int, faults: list[Any], unit: Unit) -> FaultPlan:
    return FaultPlan(seed=seed, nodes=nodes, faults=tuple(faults), unit=unit)
