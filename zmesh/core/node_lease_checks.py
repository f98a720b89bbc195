"""The node-lease core's invariants, checked after every step in tests and in the simulated
mesh: kept apart from `node_leases` (the rules) so that module holds the machine alone."""

from __future__ import annotations

from typing import TYPE_CHECKING

from zmesh.core.lease_records import WorkerRole

if TYPE_CHECKING:
    from zmesh.core.node_leases import NodeLeases

__all__ = ["validate"]


def validate(core: NodeLeases) -> None:
    """Invariants: a worker serves at most one lease and a lease has at most one worker;
    idle workers hold nothing; every granted local lease runs in the scheduler, and one
    whose worker is blocked has lent exactly its CPU (never GPUs or custom resources);
    the scheduler's own books balance (nothing leaked or double-granted); a lease or actor
    waiting for a worker has one starting for it (up to the bound on starts); a spare
    beyond the pool at rest is on a timer to retire."""
    supply = core.supply
    waiting = len(core.queues.leases) + len(core.queues.wants)
    assert 0 <= supply.starting <= supply.starting_max, f"{supply.starting} workers starting"
    if not core.stopping:
        assert min(waiting, supply.starting_max) <= supply.starting, (
            f"{waiting} leases/actors wait for a worker, only {supply.starting} starting")
        assert supply.trimming or not core.can_trim(), (
            f"{len(core.queues.idle)} idle workers, beyond the pool at rest "
            f"{supply.floor} a spare, none set to retire")
    running = core.scheduler.running()
    seen: set[bytes] = set()
    for lease in core.leases.values():
        if lease.worker is None:
            assert not lease.lent, f"lease {lease.lease_id.hex()} lent with no worker"
            continue
        rec = core.workers.get(lease.worker)
        assert rec is not None and rec.role is WorkerRole.LEASED, (
            f"lease {lease.lease_id.hex()} holds worker {lease.worker.hex()} in role "
            f"{rec.role if rec else None}")
        assert rec.lease == lease.lease_id, (
            f"worker {lease.worker.hex()} serves {rec.lease!r}, not {lease.lease_id.hex()}")
        assert lease.worker not in seen, f"worker {lease.worker.hex()} granted twice"
        seen.add(lease.worker)
        if lease.evicted:
            continue
        assert lease.lease_id in running, f"granted lease {lease.lease_id.hex()} not running"
        cpu = running[lease.lease_id].resources.get_amount("CPU")
        lent = core.scheduler.lent(lease.lease_id)
        assert lent == (cpu if lease.lent else 0), (
            f"lease {lease.lease_id.hex()} lent {lent} of its {cpu} CPU (blocked: "
            f"{lease.lent})")
    for rec in core.workers.values():
        if rec.role is WorkerRole.LEASED:
            assert rec.lease in core.leases and core.leases[rec.lease].worker == rec.worker, (
                f"worker {rec.worker.hex()} leased to {rec.lease!r}, which does not hold it")
    idle = core.queues.idle
    assert len(idle) == len(set(idle)), "a worker is idle twice"
    for worker in idle:
        assert core.workers[worker].role is WorkerRole.IDLE, f"idle {worker.hex()} busy"
    for lease_id, _ in core.queues.leases:
        queued = core.leases.get(lease_id)
        assert queued is None or queued.worker is None, f"{lease_id.hex()} waits and holds"
    core.scheduler.validate()
