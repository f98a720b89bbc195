"""`ray` in Ray-compat mode: zmesh's public API under Ray's top-level names.

Submodules (`ray.util`, `ray.actor`, `ray.exceptions`, ...) are separate aliases, loaded
when first imported or touched as attributes.
"""

from __future__ import annotations

import zmesh

__all__ = [n for n in zmesh.__all__ if n not in ("util", "exceptions")]

globals().update({n: getattr(zmesh, n) for n in __all__})
