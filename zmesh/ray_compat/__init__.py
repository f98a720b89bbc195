"""Ray-compat mode: `import ray` (and `ray.util`, `ray.actor`, ...) resolves to zmesh.

Off unless asked. Turn it on with `python -m zmesh.ray_compat script.py`, with
`zmesh.init(ray_compat=True)`, or with `zmesh.ray_compat.install()` before the first
`import ray`. Once on, every worker the program starts turns it on too (the environment
variable `ZMESH_RAY_COMPAT=1` travels with each task and actor), so libraries that do
`import ray` inside actors (verl's single controller, for one) run unchanged.

A real `ray` installed next to zmesh is shadowed while the mode is on.
"""

from __future__ import annotations

import os
import sys

from zmesh.ray_compat.finder import ALIASES, RayAliasFinder

ENV_VAR = "ZMESH_RAY_COMPAT"

_finder: RayAliasFinder | None = None


def install() -> None:
    """Make `import ray` and its submodules resolve to zmesh here and in every worker."""
    global _finder
    os.environ[ENV_VAR] = "1"
    if _finder is not None:
        return
    for name in list(sys.modules):  # a real ray imported earlier would shadow the aliases
        if name == "ray" or name.startswith("ray."):
            del sys.modules[name]
    _finder = RayAliasFinder()
    sys.meta_path.insert(0, _finder)


def uninstall() -> None:
    """Turn the mode off in this process; modules already imported as `ray` stay as they are."""
    global _finder
    os.environ.pop(ENV_VAR, None)
    if _finder is None:
        return
    sys.meta_path.remove(_finder)
    _finder = None
    for name in list(sys.modules):
        if name == "ray" or name.startswith("ray."):
            del sys.modules[name]


def is_installed() -> bool:
    """True while `import ray` resolves to zmesh in this process."""
    return _finder is not None


def install_if_requested() -> None:
    """Workers call this before loading user code: on when the caller's environment says so."""
    if _finder is None and os.environ.get(ENV_VAR) == "1":
        install()


__all__ = ["ALIASES", "ENV_VAR", "install", "install_if_requested", "is_installed", "uninstall"]
