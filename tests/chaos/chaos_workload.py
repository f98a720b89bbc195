"""The workload of zmesh's own real-process chaos runs, and the plan each seed gets.

Three nodes; the driver submits, for a few seconds, tasks with retries, ref chains, numbered
calls to two actors (max_restarts=-1, max_task_retries=-1) and puts read by tasks on other
nodes, while a worker is SIGKILLed every ~2 s, one node pauses, one node dies and 5% of
messages between nodes are dropped. Every operation goes into a History.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import zmesh
from zmesh.testing import FaultPlan, History, KillNode, KillWorker, LinkFault, Pause
from zmesh.testing.local_cluster import LocalCluster
from zmesh.util.scheduling_strategies import NodeAffinitySchedulingStrategy

GET_BOUND = 30.0
PACE = 0.1  # seconds between rounds of submissions


def chaos_plan(seed: int, duration: float = 4.0, nodes: int = 3) -> FaultPlan:
    """A worker SIGKILL every ~2 s, one pause, one node kill, 5% drop, placed by `seed`."""
    rng = FaultPlan(seed=seed).rng("chaos")
    kills = []
    t = 0.6 + rng.random() * 0.8
    while t < duration:
        kills.append(KillWorker(at=round(t, 2)))
        t += 1.5 + rng.random()
    paused, killed = rng.sample(range(1, nodes), 2)
    return FaultPlan(seed=seed, nodes=nodes, faults=(
        *kills,
        Pause(at=round(0.5 + rng.random() * (duration - 1.5), 2), node=paused, duration=0.8),
        KillNode(at=round(1.0 + rng.random() * (duration - 1.5), 2), node=killed),
        LinkFault(at=0.0, kind="drop", rate=0.05, duration=duration + 1)))


@zmesh.remote(max_retries=-1)
def square(x: int) -> int:
    return x * x


@zmesh.remote(max_retries=-1)
def add_one(x: int) -> int:
    return x + 1


@zmesh.remote(max_retries=-1)
def total(refs: list[Any]) -> int:
    return int(sum(int(np.sum(zmesh.get(r))) for r in refs))


@zmesh.remote(max_restarts=-1, max_task_retries=-1)
class Sequencer:
    """Counts the calls it runs in this incarnation: (incarnation start, count) orders them."""

    def __init__(self) -> None:
        self.born = time.time()
        self.pid = os.getpid()
        self.count = 0

    def call(self, n: int) -> tuple[float, int, int]:
        self.count += 1
        return (self.born, self.count, n)


@dataclass
class RunResult:
    seed: int
    history: History
    injected: int
    elapsed: float
    lost: set[Any] = field(default_factory=set)


def run_workload(mesh: LocalCluster, duration: float = 4.0,
                 bound: float = GET_BOUND) -> History:
    """Submit for `duration` seconds while the plan's faults fire, then resolve everything."""
    history = History()
    pending: dict[Any, tuple[Any, Any]] = {}  # ref -> (op, how to read the value)
    actors = {f"seq{i}": Sequencer.remote() for i in range(2)}
    node_ids = [row["NodeID"] for row in zmesh.nodes()]
    head = zmesh.get_runtime_context().get_node_id()
    others = [n for n in node_ids if n != head] or [head]
    i = 0
    paced = threading.Event()  # never set: waiting on it paces the submissions
    while mesh.elapsed() < duration:
        next_round = time.monotonic() + PACE
        op = history.invoke("get", caller="tasks", key=f"sq{i}", expected=i * i, retries=-1)
        pending[square.remote(i)] = (op, None)
        if i % 2 == 0:
            ref = add_one.remote(i)
            for _ in range(3):
                ref = add_one.remote(ref)
            op = history.invoke("get", caller="chains", key=f"chain{i}", expected=i + 4)
            pending[ref] = (op, None)
        for name, actor in actors.items():
            op = history.invoke("call", caller=name, expected=i)
            pending[actor.call.remote(i)] = (op, "call")
        if i % 3 == 0:
            put = history.invoke("put", caller="puts", key=f"put{i}")
            data = zmesh.put(np.arange(i + 10))
            put.ok()
            where = NodeAffinitySchedulingStrategy(others[i % len(others)], soft=True)
            op = history.invoke("get", caller="reads", key=f"put{i}",
                                expected=sum(range(i + 10)))
            pending[total.options(scheduling_strategy=where).remote([data])] = (op, None)
        i += 1
        _collect(pending, timeout=max(0.0, next_round - time.monotonic()))
        paced.wait(max(0.0, next_round - time.monotonic()))
    deadline = time.monotonic() + bound
    while pending and time.monotonic() < deadline:
        _collect(pending, timeout=0.5)
    for op, _ in pending.values():
        op.indeterminate(TimeoutError(f"not resolved {bound:g}s after the faults ended"))
    return history


def _collect(pending: dict[Any, tuple[Any, Any]], timeout: float) -> None:
    refs = list(pending)
    if not refs:
        return
    ready, _ = zmesh.wait(refs, num_returns=len(refs), timeout=timeout)
    for ref in ready:
        op, how = pending.pop(ref)
        try:
            value = zmesh.get(ref, timeout=10)
        except zmesh.exceptions.GetTimeoutError as exc:
            op.indeterminate(exc)
            continue
        except zmesh.exceptions.RayError as exc:
            op.fail(exc)
            continue
        except Exception as exc:  # an undocumented error: the checker names it
            op.fail(exc)
            continue
        if how == "call":
            born, count, n = value
            op.ok(n, applied=(born, count))
        else:
            op.ok(value)
