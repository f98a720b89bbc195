"""Seed loop over the random fault schedules of tests/faults (runtime_program.Checker).

Runs N schedules drawn like the CI's (`--family main`: test_runtime_under_faults's steps;
`hand_on`, `ctor`: test_borrow_hand_off's), each in this one process, and appends every
schedule with a violation to a JSON-lines log (seed, steps, violations, story), so it can be
replayed with `runtime_program.run_schedule(seed, steps)`. `--ci` draws exactly the CI's
schedules (hypothesis derandomized, as the test does); otherwise `--hypothesis-seed` picks
another stream. Every failed get (excused or not) goes to `--gets` when given.

    nice -n 10 .venv/bin/python tools/fault_seed_loop.py --n 500 --hypothesis-seed 3 \\
        --log /tmp/loop3.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests" / "faults"), str(ROOT / "tests"), str(ROOT)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=200, help="schedules to run")
    ap.add_argument("--family", choices=["main", "hand_on", "ctor"], default="main")
    ap.add_argument("--ci", action="store_true", help="the CI's derandomized schedules")
    ap.add_argument("--hypothesis-seed", type=int, default=0)
    ap.add_argument("--log", required=True, help="JSON lines: one failing schedule a line")
    ap.add_argument("--gets", default="", help="JSON lines: every failed get")
    args = ap.parse_args()

    import logging

    import runtime_program

    logging.disable(logging.WARNING)  # (a fenced node warns each time)
    from hypothesis import HealthCheck, Phase, given, seed, settings
    from hypothesis import strategies as st

    if args.family == "main":
        import test_runtime_under_faults as t
        steps = st.lists(t._step, min_size=t.STEPS, max_size=t.STEPS)
    else:
        import test_borrow_hand_off as t
        ops, faults, n = ((t._hand_on_ops, t._hand_on_faults, 20) if args.family == "hand_on"
                          else (t._ctor_ops, t._ctor_faults, 12))
        steps = st.lists(st.one_of(ops, ops, faults), min_size=n, max_size=n)

    failing = 0
    started = time.monotonic()

    @settings(max_examples=args.n, deadline=None, database=None, derandomize=args.ci,
              phases=(Phase.explicit, Phase.generate),
              suppress_health_check=list(HealthCheck))
    @given(seed=st.integers(0, 2**32 - 1), steps=steps)
    def check(seed: int, steps: list[tuple[Any, ...]]) -> None:
        nonlocal failing
        violations, mesh = runtime_program.run_schedule(seed, steps)
        if violations:
            failing += 1
            with open(args.log, "a") as f:
                f.write(json.dumps({"seed": seed, "steps": steps, "violations": violations,
                                    "story": mesh.story(120)}) + "\n")
            print(f"FAIL seed={seed}: {violations[0][:300]}", flush=True)

    run = check if args.ci else seed(args.hypothesis_seed)(check)
    run()
    totals: Counter[str] = runtime_program.totals
    if args.gets:
        with open(args.gets, "a") as f:
            for g in runtime_program.failed_gets:
                f.write(json.dumps(g) + "\n")
    print(json.dumps({"family": args.family, "ci": args.ci, "hseed": args.hypothesis_seed,
                      "failing schedules": failing, "wall_s": round(time.monotonic() - started),
                      **totals}), flush=True)


if __name__ == "__main__":
    main()
