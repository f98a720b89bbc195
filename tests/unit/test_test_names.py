"""The suite's own hygiene: pytest's default import mode needs unique test module names."""

from __future__ import annotations

from collections import Counter
from pathlib import Path


def test_every_test_module_has_a_unique_basename():
    tests = Path(__file__).resolve().parents[1]
    names = Counter(p.name for p in tests.rglob("test_*.py"))
    assert [n for n, c in names.items() if c > 1] == []
