"""`assert_never` for exhaustive matches over actions (typing's own from Python 3.11)."""

from __future__ import annotations

import sys
from typing import NoReturn

if sys.version_info >= (3, 11):
    from typing import assert_never as assert_never
else:  # pragma: no cover - Python 3.10

    def assert_never(value: NoReturn, /) -> NoReturn:
        """Fail loudly when a value no branch handles reaches the end of a match."""
        raise AssertionError(f"unhandled value: {value!r}")
