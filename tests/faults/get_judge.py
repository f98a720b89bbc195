"""Which failed gets of a random fault schedule the faults excuse (runtime_program.Checker).

A documented zmesh error is not enough: a get fails only where Ray's semantics let it,
given what the schedule did. `FaultHistory` records what happened to which process and
when (kills of a worker, an owner, an actor or a node; nodes taken for dead by the mesh,
seen from the nodes' own membership verdicts, which is what pauses, partitions and slow
links lead to); `judge` says, for one failed get, why the faults excuse it, or None: an
unexcused failure is a violation.

The rules (each names the fault that lets the operation fail; see `judge`):

- every operation: a placement group removed under its task fails it
  (PlacementGroupError / TaskUnschedulableError);
- a task of the driver (max_retries=3: task, chain, tree, pg, and the first get of borrow,
  relay, inner, hand_on) fails with WorkerCrashedError / NodeDiedError only after at least
  four deaths of processes that may have run one attempt (kills of task workers or owners,
  node kills, nodes taken for dead) while it ran;
- a driver put (borrow, relay) is never lost: its owner (the driver) lives and its primary
  copy is on n0, never killed. A read of it inside a task fails only if a node was taken
  for dead while the task ran (the reader's node: the driver refuses its processes, 'took
  it for dead'; or n0, seen from the reader's node: the owner's node died);
- a value owned by a worker (inner, hand_on: the worker that made the put) is lost only
  once that worker, or its node, died or was taken for dead (OwnerDiedError, as in Ray);
- an actor call (Log: restarts 0/1/-1, task retries 0/-1; CtorHolder: 1 and 1) fails with
  an actor error only when the actor died while the call was in flight and the call may not
  be retried (max_task_retries=0), or the actor died more often than it may restart; a
  death of the actor is a kill of its worker, or a kill of a node or a node taken for
  dead (where it ran is not tracked: any node counts). A CtorHolder's read also reads a ref
  owned by a third worker: lost once any worker or node died or was taken for dead since
  the holder was made.

A kill acts from when it is injected until SETTLE_S after (detection: suspicion, the
owner timeout); a node taken for dead from the first verdict until BACK_SETTLE_S after a
member counts it alive again (it fences its old workers, owners accept its new ones): an
operation submitted later than that must not fail for it (the CI's real-process chaos run
caught tasks placed on a node back from a false death reading the driver's puts as lost,
bc84a3b).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fault_history import Disruption, FaultHistory, node_of

from zmesh.errors import (
    ActorError,
    NodeDiedError,
    ObjectLostError,
    PlacementGroupError,
    TaskUnschedulableError,
    WorkerCrashedError,
)

TASK_RETRIES = 3  # max_retries of the program's remote functions
TASK_KINDS = ("task", "chain", "tree", "pg", "borrow", "relay", "inner", "hand_on")


@dataclass
class Failed:
    """A failed get, as `judge` sees it."""

    kind: str
    error: BaseException
    t0: float  # when the operation was submitted (a ctor read: when its actor was made)
    t1: float  # when the get failed
    stage: str = "result"  # "result": the operation's own return; "deref": the ref inside it
    inner_owner: str = ""  # the owner of the ref inside the return (deref stage)
    inner_owner_alive: bool = True  # ... is a live worker when the get failed
    group_removed: bool = False
    group_made: float | None = None  # when the placement group it runs in was made
    actor_id: bytes = b""
    actor_made: float = 0.0
    restarts: int = 0
    task_retries: int = 0


def _deaths_for_tasks(ds: list[Disruption]) -> list[Disruption]:
    return [d for d in ds if d.what in ("kill_node", "taken_for_dead")
            or (d.what in ("kill_worker", "kill_owner") and d.state != "actor")]


def _owner_died(ds: list[Disruption], owner: str) -> Disruption | None:
    node = node_of(owner)
    for d in ds:
        if d.what in ("kill_worker", "kill_owner") and d.address == owner:
            return d
        if d.what in ("kill_node", "taken_for_dead") and d.node == node:
            return d
    return None


def _actor_deaths(ds: list[Disruption], actor_id: bytes) -> list[Disruption]:
    """Deaths of the actor's process: its worker killed, or the node it ran on (or was
    placed on) killed or taken for dead. A killed node counts once for each member that
    had placed the actor there when it found the node dead: members' views lag, and one that
    had not heard yet may place the restart there again (n0 places it on n1, killed; n0
    learns of it and restarts it through n2, which forwards it to n1, not knowing yet): each
    placement is a creation that failed, and each costs a restart (as a creation task that
    fails does in Ray, ReconstructActor)."""
    out: dict[Any, Disruption] = {}
    seen = {d.node for d in ds if d.what == "kill_node_seen" and actor_id in d.actors}
    for d in ds:
        if d.what in ("kill_worker", "kill_actor", "kill_owner"):
            later = bytes(getattr(d.info, "actor_id", b"") or b"")
            if actor_id in (d.actor_id, later):
                out.setdefault(("worker", d.address, d.t0), d)
        elif actor_id not in d.actors:
            continue
        elif d.what == "kill_node_seen":
            out.setdefault(("killed", d.node, min(d.observers)), d)
        elif d.what == "kill_node":
            if d.node not in seen:
                out.setdefault(("killed", d.node, ""), d)
        else:
            out.setdefault((d.node, d.t0), d)
    return list(out.values())


def _driver_taken_for_dead(ds: list[Disruption], made: float) -> Disruption | None:
    """n0, the driver's node, taken for dead after something the driver owns was made and
    before n0 was back: the others took the driver for dead too and gave up on what it owned
    then (its actors are killed for good and its placement groups removed, as for a dead
    owner; drivers are not fenced, docs/architecture.md). What it makes once n0 is back
    is not excused."""
    return next((d for d in ds if d.what == "taken_for_dead" and d.node == "n0"
                 and made <= d.back), None)


def judge(f: Failed, history: FaultHistory) -> str | None:
    """Why the faults excuse this failed get, or None (a violation)."""
    err = f.error
    if f.group_removed and isinstance(err, PlacementGroupError | TaskUnschedulableError):
        return "its placement group was removed"
    during = history.during(f.t0, f.t1)
    if f.group_made is not None and isinstance(
            err, PlacementGroupError | TaskUnschedulableError) \
            and _driver_taken_for_dead(history.during(f.group_made, f.t1),
                                       f.group_made) is not None:
        return "n0 was taken for dead since its group was made: the mesh removed the group"
    if f.kind in ("call", "ctor"):
        return _judge_call(f, history, during)
    if isinstance(err, WorkerCrashedError | NodeDiedError) and f.stage == "result" \
            and f.kind in TASK_KINDS:
        # (a crash inside a nested get of tree/hand_on is a child task's: the same count)
        deaths = _deaths_for_tasks(during)
        if len(deaths) > TASK_RETRIES:
            return (f"{len(deaths)} workers or nodes died while it ran: more than its "
                    f"{TASK_RETRIES} retries")
        return None
    if isinstance(err, ObjectLostError):
        if f.stage == "deref" and f.kind in ("inner", "hand_on"):
            # the ref inside the return is owned by the worker that made the put; its
            # primary copy is on that worker's node: lost with either (OwnerDiedError)
            d = _owner_died(during, f.inner_owner)
            if d is not None:
                return f"its owner {f.inner_owner} died ({d.what})"
            ended = _deaths_for_tasks(during)
            if not f.inner_owner_alive and ended:
                # Its node stopped it: a worker whose lease's owner died is stopped (as
                # Ray's raylet kills the workers leased to a dead owner), and what it owned
                # goes with it; here make_big's worker, leased to hand_on's, once that died
                return (f"its owner {f.inner_owner} was stopped after {ended[0].what} "
                        f"{ended[0].address or ended[0].node}")
            if _driver_taken_for_dead(during, f.t0) is not None:
                # the owner took the driver (on n0) for dead while it borrowed the ref, and
                # dropped its borrow: the driver's reads are refused from then on
                return "n0 was taken for dead while the driver borrowed it"
            return None
        if f.stage == "deref" and f.kind == "relay":
            return None  # the driver reads its own put: never lost while it lives
        taken = [d for d in during if d.what == "taken_for_dead"]
        if taken:
            # a reader on a node taken for dead is refused ('took it for dead and dropped
            # its borrow'); a reader whose node took n0 (the owner's) for dead reads the
            # owner as dead (OwnerDiedError); a task's nested owner likewise
            return f"{taken[0].node} was taken for dead while it ran"
        if f.kind in ("tree", "hand_on") and _deaths_for_tasks(during):
            # the nested get reads values a worker owns (a child's return, make_big's
            # put): lost when that worker or its node died
            return "a worker owning a value it read died while it ran"
        return None
    return None


def _judge_call(f: Failed, history: FaultHistory, during: list[Disruption]) -> str | None:
    err = f.error
    lifetime = history.during(f.actor_made, f.t1)
    if _driver_taken_for_dead(lifetime, f.actor_made) is not None:
        return "n0 was taken for dead while the actor lived: its owner, the driver, too"
    since = _actor_deaths(lifetime, f.actor_id)
    now = _actor_deaths(during, f.actor_id)
    if isinstance(err, ActorError | WorkerCrashedError | NodeDiedError | ObjectLostError):
        if f.restarts != -1 and len(since) > f.restarts:
            return f"the actor died {len(since)} times, more than its {f.restarts} restarts"
        if now and f.task_retries == 0:
            return "the actor died while the call was in flight (max_task_retries=0)"
    if f.kind == "ctor":
        if isinstance(err, ActorError | WorkerCrashedError | NodeDiedError) and now \
                and len(now) > f.task_retries:
            return "the actor died more often than its task retries while the call ran"
        if isinstance(err, ObjectLostError) and _deaths_for_tasks(
                history.during(f.actor_made, f.t1)):
            # it reads a ref a third worker (make_big's) owns, stored on that worker's node
            return "a worker or node died since the holder was made (the ref's owner?)"
    return None
