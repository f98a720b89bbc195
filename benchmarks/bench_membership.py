"""SWIM membership on SimNet at 10, 100 and 1,000 members, with the default config.

Measures, in simulated seconds: how long until every member knows of a crash (p50 and max
over the members), how long until every member knows of a join, and the messages each
member sends per second in steady state (which must stay flat as the mesh grows).

    python benchmarks/bench_membership.py            # ~1 minute
    python benchmarks/bench_membership.py --quick    # a few seconds
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from dataclasses import dataclass

from zmesh.core.membership import MemberEventKind, Membership, MembershipConfig
from zmesh.core.membership_sim import add_member, first_event_times, settled_mesh
from zmesh.testing.simnet import SimNet

GONE = (MemberEventKind.DEAD, MemberEventKind.LEFT)


@dataclass
class Run:
    crash: list[float]  # per surviving member: seconds from the crash until it knew
    missed: int  # surviving members that never learned of the crash
    join: float | None  # seconds until the last member knew of the join (None: never)
    load: float  # messages sent per member per second in steady state


def _wait_known(
    net: SimNet,
    nodes: dict[str, Membership],
    about: str,
    kinds: tuple[MemberEventKind, ...],
    expected: set[str],
    limit: float,
) -> dict[str, float]:
    """Run until every expected node had an event of `kinds` about `about`; event times."""
    seen: dict[str, float] = {}
    deadline = net.now + limit
    while net.now < deadline:
        net.run_for(0.1)
        first_event_times(nodes, about, kinds, seen)
        if expected <= seen.keys():
            break
    return seen


def run_once(n: int, seed: int, config: MembershipConfig, drop: float = 0.0) -> Run:
    rng = random.Random(seed)
    net = SimNet(seed, drop_rate=drop)
    nodes = settled_mesh(net, n, seed=seed, config=config)
    net.run_for(2.0)  # let timers spread out and the start-up push-pulls settle
    for node in nodes.values():
        node.drain_events()

    window = 2.0 if n >= 1000 else 4.0
    before = sum(net.sent.values())
    net.run_for(window)
    load = (sum(net.sent.values()) - before) / n / window

    victim = f"m{rng.randrange(n)}"
    net.crash(victim)
    crashed_at = net.now
    survivors = set(nodes) - {victim}
    seen = _wait_known(net, nodes, victim, GONE, survivors, limit=15.0)
    crash_times = [seen[a] - crashed_at for a in survivors if a in seen]
    missed = len(survivors - seen.keys())
    del nodes[victim]

    newcomer = f"m{n}"
    seed_member = rng.choice(sorted(survivors))
    joined_at = net.now
    nodes[newcomer] = add_member(net, newcomer, seed=seed, config=config, join=[seed_member])
    seen = _wait_known(net, nodes, newcomer, (MemberEventKind.JOINED,), survivors, limit=15.0)
    join_max = max(seen[a] - joined_at for a in survivors) if survivors <= seen.keys() else None
    return Run(crash_times, missed, join_max, load)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="10 and 100 members, one run each")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--drop", type=float, default=0.0, help="message loss rate, 0..1")
    args = parser.parse_args()
    config = MembershipConfig()
    plan = [(10, 1), (100, 1)] if args.quick else [(10, 20), (100, 10), (1000, 3)]

    header = (
        f"{'members':>7} {'runs':>4} {'crash p50 s':>11} {'crash max s':>11} {'missed':>6} "
        f"{'join max s':>10} {'msgs/member/s':>13} {'wall s':>6}"
    )
    print(header)
    print("-" * len(header))
    for n, runs in plan:
        started = time.perf_counter()
        results = [run_once(n, args.seed + r, config, args.drop) for r in range(runs)]
        wall = time.perf_counter() - started
        crash = [t for r in results for t in r.crash]
        joins = [r.join for r in results if r.join is not None]
        join_max = f"{max(joins):.2f}" if len(joins) == len(results) else "never"
        load = statistics.mean(r.load for r in results)
        missed = sum(r.missed for r in results)
        print(
            f"{n:>7} {runs:>4} {statistics.median(crash):>11.2f} {max(crash):>11.2f} "
            f"{missed:>6} {join_max:>10} {load:>13.1f} {wall:>6.1f}"
        )
    print(
        f"\ndefaults: probe {config.probe_interval}s, ack timeout {config.ack_timeout}s, "
        f"suspicion {config.suspicion_timeout(100):.1f}s at 100 members; "
        f"target: crash known everywhere within 3 s at 100 members; message loss {args.drop:.0%}"
    )


if __name__ == "__main__":
    main()
