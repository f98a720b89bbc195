"""zmesh's microbenchmark suite: the Ray anchor benchmark's workloads, run on zmesh.

    python benchmarks/microbenchmark.py [--quick] [--only a,b] [--json F] [--baseline ray.json]
    zmesh microbenchmark [--quick] [--only a,b] [--json F] [--baseline ray.json]

Workload and metric names and definitions match `anchor_bench.py` (Ray vs zmesh), and the
JSON it writes has the anchor's shape, so `anchor_bench.py --compare ray.json zmesh.json`
reads it. `--baseline` prints the ratio to another run (> 1 means this run is better).
Figures on a shared machine are noisy: compare runs made in one sitting.
"""

from __future__ import annotations

import argparse
import datetime as dt
import difflib
import json
import os
import platform
import signal
import sys
import time
import traceback
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

sys.path.insert(0, str(Path(__file__).resolve().parent))  # siblings, also when run by the CLI

from micro_processes import CHILD_MARK, SUBPROC, child_memory, child_startup  # noqa: E402
from micro_workloads import INPROC, NUM_CPUS, REPEATS, Cfg, Results  # noqa: E402

ORDER = list(SUBPROC) + list(INPROC)
METRIC_GROUP = {m: g for g, (_, ms) in {**SUBPROC, **INPROC}.items() for m in ms}


def resolve_only(only: str | None) -> list[str]:
    """Workload names to run from a comma list of workload or metric names, in suite order."""
    if not only:
        return list(ORDER)
    want = set()
    for name in (n.strip() for n in only.split(",")):
        if not name:
            continue
        if name in ORDER:
            want.add(name)
        elif name in METRIC_GROUP:
            want.add(METRIC_GROUP[name])
        else:
            close = difflib.get_close_matches(name, ORDER + list(METRIC_GROUP), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"unknown workload or metric {name!r}{hint}; workloads: "
                             f"{', '.join(ORDER)}")
    return [g for g in ORDER if g in want]


class WorkloadTimeout(Exception):
    pass


@contextmanager
def deadline(seconds: int, name: str) -> Iterator[None]:
    """Interrupt a workload that runs past `seconds` (only on the main thread)."""
    def _alarm(signum: int, frame: object) -> None:
        raise WorkloadTimeout(f"{name} ran past {seconds}s")

    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _fmt(v: float) -> str:
    a = abs(v)
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.2f}"
    return f"{v:.4f}" if v else "0"


def ratio(mine: dict[str, Any], base: dict[str, Any]) -> float | None:
    """How much better `mine` is than `base` (> 1 = better), by the metric's direction."""
    if not base.get("value") or not mine.get("value"):
        return None
    if mine["better"] == "higher":
        return float(mine["value"] / base["value"])
    return float(base["value"] / mine["value"])


def format_table(results: Results, loads: dict[str, float],
                 baseline: dict[str, Any] | None = None) -> str:
    """The results as an aligned text table, one metric per row."""
    head = ["metric", "median", "unit", "better", "load1", "samples"]
    if baseline:
        head[4:4] = [f"{baseline['backend']}", "vs it"]
    rows = [head]
    for name, m in results.items():
        smp = m["samples"]
        row = [name, _fmt(m["value"]), m["unit"], m["better"],
               f"{loads.get(METRIC_GROUP.get(name, ''), 0.0):.2f}",
               " ".join(_fmt(s) for s in smp) if len(smp) <= 5 else f"({len(smp)} values)"]
        if baseline:
            b = baseline["results"].get(name)
            x = ratio(m, b) if b else None
            row[4:4] = ["-" if not b else _fmt(b["value"]), "-" if x is None else f"{x:.2f}x"]
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    numeric = {j for j, h in enumerate(head) if h not in ("metric", "unit", "better", "samples")}
    lines = []
    for i, r in enumerate(rows):
        lines.append("  ".join(c.rjust(widths[j]) if j in numeric else c.ljust(widths[j])
                               for j, c in enumerate(r)).rstrip())
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def machine_info() -> dict[str, Any]:
    info: dict[str, Any] = {"platform": platform.platform(), "python": platform.python_version(),
                            "cpu_count": os.cpu_count()}
    try:
        info["cpu_affinity"] = len(os.sched_getaffinity(0))
    except AttributeError:  # not on every platform
        pass
    return info


def run(*, quick: bool = False, only: str | None = None, json_path: str | None = None,
        baseline_path: str | None = None, timeout: int = 600, out: TextIO = sys.stdout) -> int:
    """Run the suite, print the table (and write JSON); returns 1 if a workload failed."""
    groups = resolve_only(only)
    baseline = json.loads(Path(baseline_path).read_text()) if baseline_path else None
    cfg = Cfg(quick)
    results: Results = {}
    errors: dict[str, str] = {}
    walls: dict[str, float] = {}
    loads: dict[str, float] = {}

    def run_group(name: str, fn: Any, *args: Any) -> None:
        t = time.perf_counter()
        print(f"[{name}] ...", file=sys.stderr, flush=True)
        try:
            with deadline(timeout, name):
                results.update(fn(*args))
        except Exception:
            errors[name] = traceback.format_exc()
        walls[name] = round(time.perf_counter() - t, 2)
        loads[name] = os.getloadavg()[0]

    for g in groups:  # fresh-process workloads first, before this process starts a runtime
        if g in SUBPROC:
            run_group(g, SUBPROC[g][0], cfg)
    inproc = [g for g in groups if g in INPROC]
    init_s = None
    if inproc:
        import zmesh

        t = time.perf_counter()
        zmesh.init(num_cpus=NUM_CPUS)
        init_s = time.perf_counter() - t
        try:
            for g in inproc:
                run_group(g, INPROC[g][0], zmesh, cfg)
        finally:
            zmesh.shutdown()

    import zmesh

    ordered = {m: results[m] for g in ORDER for m in {**SUBPROC, **INPROC}[g][1] if m in results}
    print(f"\nzmesh {zmesh.__version__} microbenchmark (num_cpus={NUM_CPUS}, median of {REPEATS}"
          f"{', QUICK: not comparable' if quick else ''}; load1 = 1-minute load average after "
          f"the workload)", file=out)
    print(format_table(ordered, loads, baseline), file=out)
    gl = ordered.get("get_large_gbps", {}).get("notes")
    if gl:
        print(f"\nget_large zero-copy: {gl['zero_copy']} (owndata={gl['owndata']}, writeable="
              f"{gl['writeable']}, same buffer on two gets={gl['same_buffer_on_two_gets']})",
              file=out)
    for name, err in errors.items():
        print(f"\nERROR in {name}:\n{err}", file=out)
    if json_path:
        doc = {"backend": "zmesh", "backend_version": zmesh.__version__, "quick": quick,
               "num_cpus": NUM_CPUS, "repeats": REPEATS,
               "date_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
               "machine": machine_info(), "driver_init_s": init_s, "workload_wall_s": walls,
               "results": ordered, "errors": errors}
        Path(json_path).write_text(json.dumps(doc, indent=2) + "\n")
        print(f"\nwrote {json_path}", file=out)
    return 1 if errors else 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The suite's options, shared by this script and `zmesh microbenchmark`."""
    parser.add_argument("--quick", action="store_true",
                        help="small counts: a smoke test in seconds (figures not comparable)")
    parser.add_argument("--only", metavar="NAMES",
                        help=f"comma-separated workload or metric names; workloads: "
                             f"{', '.join(ORDER)}")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON here")
    parser.add_argument("--baseline", metavar="FILE",
                        help="a JSON of another run (e.g. Ray's, from anchor_bench.py) to "
                             "print ratios against")
    parser.add_argument("--timeout", type=int, default=600, metavar="S",
                        help="time limit per workload, seconds (default 600)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    parser.add_argument("--_child", help=argparse.SUPPRESS)
    parser.add_argument("--_settle", type=float, default=3.0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args._child:
        data = child_startup() if args._child == "startup" else child_memory(args._settle)
        print(CHILD_MARK + json.dumps(data), flush=True)
        return 0
    try:
        return run(quick=args.quick, only=args.only, json_path=args.json,
                   baseline_path=args.baseline, timeout=args.timeout)
    except ValueError as err:
        parser.error(str(err))


if __name__ == "__main__":
    raise SystemExit(main())
