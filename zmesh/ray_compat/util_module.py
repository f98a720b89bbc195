"""`ray.util` in Ray-compat mode: zmesh.util, whose names follow Ray's."""

from __future__ import annotations

from zmesh.util import *  # noqa: F403
from zmesh.util import __all__ as __all__
