"""The `zmesh` command line: version and help now; nodes, status and benchmarks as they land."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from zmesh._version import __version__


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for every `zmesh` subcommand."""
    parser = argparse.ArgumentParser(
        prog="zmesh",
        description="zmesh: a brokerless actor and task runtime for Python on ZeroMQ.",
    )
    parser.add_argument("--version", action="version", version=f"zmesh {__version__}")
    parser.add_subparsers(dest="command", metavar="COMMAND")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stdout)
        return 0
    return 0
