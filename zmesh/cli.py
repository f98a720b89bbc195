"""The `zmesh` command line: one `add_<name>_command` per subcommand, each setting its handler.

`zmesh microbenchmark` runs the suite in the source checkout's `benchmarks/` folder.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType

from zmesh._version import __version__
from zmesh.runtime.mesh_cli import MESH_COMMANDS
from zmesh.runtime.ops_cli import OPS_COMMANDS

Handler = Callable[[argparse.Namespace], int]
#: the benchmarks/ folder of the source checkout this package is installed from (editable)
BENCHMARKS_DIR = Path(__file__).resolve().parent.parent / "benchmarks"


def _load_microbenchmark() -> ModuleType:
    """benchmarks/microbenchmark.py as a module; FileNotFoundError says where it looked."""
    path = BENCHMARKS_DIR / "microbenchmark.py"
    if not path.is_file():
        raise FileNotFoundError(
            f"zmesh microbenchmark runs benchmarks/microbenchmark.py from a source checkout "
            f"(pip install -e .), and there is none at {path}")
    spec = importlib.util.spec_from_file_location("zmesh_microbenchmark", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _microbenchmark_arguments(parser: argparse.ArgumentParser) -> None:
    # the options live here too, so that `--help` works without the benchmarks folder
    parser.add_argument("--quick", action="store_true",
                        help="small counts: a smoke test in seconds (figures not comparable)")
    parser.add_argument("--only", metavar="NAMES",
                        help="comma-separated workload or metric names (e.g. tasks_sync,put_small)")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON here")
    parser.add_argument("--baseline", metavar="FILE",
                        help="the JSON of another run (e.g. Ray's, from anchor_bench.py) to "
                             "print ratios against")
    parser.add_argument("--timeout", type=int, default=600, metavar="S",
                        help="time limit per workload, seconds (default 600)")


def run_microbenchmark(args: argparse.Namespace) -> int:
    """Run the microbenchmark suite and print its table; 1 if a workload failed."""
    try:
        bench = _load_microbenchmark()
    except FileNotFoundError as err:
        print(f"zmesh microbenchmark: {err}", file=sys.stderr)
        return 2
    try:
        code: int = bench.run(quick=args.quick, only=args.only, json_path=args.json,
                              baseline_path=args.baseline, timeout=args.timeout)
    except ValueError as err:  # an unknown workload name
        print(f"zmesh microbenchmark: {err}", file=sys.stderr)
        return 2
    return code


def add_microbenchmark_command(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "microbenchmark", help="time tasks, actors, objects and start-up on this machine",
        description="Run Ray's anchor workloads (tasks, actors, put/get, wait, placement "
                    "groups, start-up, memory) on a private zmesh runtime and print a table.")
    _microbenchmark_arguments(parser)
    parser.set_defaults(handler=run_microbenchmark)


#: every subcommand, in the order `--help` lists them; add new ones here
COMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [  # type: ignore[type-arg]
    *MESH_COMMANDS,
    *OPS_COMMANDS,
    add_microbenchmark_command,
]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for every `zmesh` subcommand."""
    parser = argparse.ArgumentParser(
        prog="zmesh",
        description="zmesh: a brokerless actor and task runtime for Python on ZeroMQ.",
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"zmesh {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add_command in COMMANDS:
        add_command(subparsers)
    for sub in subparsers.choices.values():
        sub.allow_abbrev = False  # `--num-cpu` is an error, never a silent `--num-cpus`
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stdout)
        return 0
    return handler(args)
