"""Root conftest: fixtures shared by every test directory.

Being the rootmost conftest (tests/ has no __init__.py), pytest puts tests/ on sys.path, so
helper modules such as `transport_fixtures` are imported by name from test modules.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest

pytest_plugins = ["transport_fixtures", "runtime_fixtures"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--slow", action="store_true", default=False,
                     help="also run long soaks (tests marked soak) and the long variants "
                          "(1,000 hypothesis fault schedules on the simulated mesh)")
    parser.addoption("--lenient-liveness", action="store_true", default=False,
                     help="simulated-mesh fault runs: a get that hangs or a leak after a "
                          "kill, pause or partition is counted, not a violation (it is a "
                          "violation by default)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--slow"):
        return
    skip = pytest.mark.skip(reason="a long soak: run with --slow")
    for item in items:
        if "soak" in item.keywords:
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """The simulated-mesh fault runs' figures (schedules, steps, faults, violations)."""
    program = sys.modules.get("runtime_program")
    totals = getattr(program, "totals", None)
    if not totals:
        return
    terminalreporter.section("zmesh fault injection on the simulated mesh")
    order = ["schedules", "steps", "faults injected", "messages", "gets checked",
             "gets failed (documented errors)", "gets failed, excused by a fault",
             "gets failed, unexcused (violations)", "gets timed out (messages lost)",
             "liveness failures after kills/pauses/partitions",
             "schedules with such liveness failures", "violations"]
    for key in order + sorted(set(totals) - set(order)):
        if key in totals or key == "violations":
            terminalreporter.write_line(f"{key:>48}: {totals.get(key, 0)}")
    seeds = getattr(program, "liveness_seeds", [])
    if seeds:
        terminalreporter.write_line(f"{'seeds with liveness failures (first 20)':>48}: "
                                    f"{seeds[:20]}")
