"""`ray.experimental` and `ray.experimental.state` in Ray-compat mode: packages only.

`ray.experimental.state.api` is zmesh.util.state; `ray.util.collective` is zmesh.collective.
"""

from __future__ import annotations

__all__: list[str] = []
