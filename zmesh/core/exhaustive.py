"""`assert_never` for exhaustive `match` over a core's actions, on Python 3.10 too."""

from __future__ import annotations

import sys
from typing import NoReturn

if sys.version_info >= (3, 11):
    from typing import assert_never as assert_never
else:  # pragma: no cover - 3.10
    def assert_never(arg: NoReturn, /) -> NoReturn:
        """Fails at type-check time when a `match` misses a case, and at run time if reached."""
        raise AssertionError(f"unhandled case: {arg!r}")
