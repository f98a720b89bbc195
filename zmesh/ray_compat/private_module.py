"""`ray._private` in Ray-compat mode: only `ray._private.state`, which libraries read."""

from __future__ import annotations

__all__: list[str] = []
