"""The import hook behind Ray-compat mode: `ray.*` module names mapped to zmesh modules.

Each alias is a fresh module object whose attributes come from one zmesh module (plus a
few Ray-only names), so `ray.get is zmesh.get` and `ray.ObjectRef is zmesh.ObjectRef`, and
adding `ray.actor` never changes `zmesh` itself.
"""

from __future__ import annotations

import copyreg
import importlib
import importlib.machinery
import types
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from importlib.abc import Loader as _LoaderBase
    from importlib.abc import MetaPathFinder as _FinderBase
else:  # importlib.abc pulls in importlib.resources, tempfile, shutil, zipfile... in every
    _LoaderBase = _FinderBase = object  # worker; the import system needs only the methods

# ray module name -> the zmesh module that answers for it
ALIASES: dict[str, str] = {
    "ray": "zmesh.ray_compat.ray_module",
    "ray.actor": "zmesh.ray_compat.actor_module",
    "ray.exceptions": "zmesh.exceptions",
    "ray.runtime_context": "zmesh.runtime_context",
    "ray.util": "zmesh.ray_compat.util_module",
    "ray.util.placement_group": "zmesh.util.placement_group",
    "ray.util.scheduling_strategies": "zmesh.util.scheduling_strategies",
    "ray.util.state": "zmesh.util.state",
    "ray.util.actor_pool": "zmesh.util.actor_pool",
    "ray.util.queue": "zmesh.util.queue",
    "ray.util.multiprocessing": "zmesh.util.multiprocessing",
    "ray.util.collective": "zmesh.collective",
    "ray.experimental": "zmesh.ray_compat.experimental_module",
    "ray.experimental.state": "zmesh.ray_compat.experimental_module",
    "ray.experimental.state.api": "zmesh.util.state",
    "ray._private": "zmesh.ray_compat.private_module",
    "ray._private.state": "zmesh.ray_compat.private_state",
    "ray.cluster_utils": "zmesh.testing.cluster",
}


class _AliasModule(types.ModuleType):
    """A module that keeps a function when a submodule of the same name is imported.

    `ray.util.placement_group` is a function, and also a module that `from
    ray.util.placement_group import PlacementGroup` loads; the import must not replace the
    function (Ray's own package behaves the same way).
    """

    def __setattr__(self, name: str, value: Any) -> None:
        old = self.__dict__.get(name)
        if (isinstance(value, types.ModuleType) and old is not None
                and not isinstance(old, types.ModuleType)):
            return
        super().__setattr__(name, value)


def _reduce_alias(module: types.ModuleType) -> tuple[Any, tuple[str]]:
    # by name, as pickle does for any module: the receiving worker imports its own alias
    return importlib.import_module, (module.__name__,)


copyreg.pickle(_AliasModule, _reduce_alias)


class _AliasLoader(_LoaderBase):
    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return _AliasModule(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        source = importlib.import_module(self.target)
        public = getattr(source, "__all__", None)
        names = public if public is not None else [n for n in vars(source)
                                                    if not n.startswith("__")]
        for name in names:
            value = getattr(source, name)
            if isinstance(value, types.ModuleType) and f"{module.__name__}.{name}" in ALIASES:
                continue  # `ray.util` is its own alias, not zmesh.util: loaded on first use
            setattr(module, name, value)
        extra = getattr(source, "RAY_EXTRA", None)
        if extra:
            for name, value in extra.items():
                setattr(module, name, value)
        module.__doc__ = source.__doc__

        def __getattr__(name: str) -> Any:
            if name.startswith("__"):
                raise AttributeError(name)
            full = f"{module.__name__}.{name}"
            if full in ALIASES:  # `import ray` then `ray.util.x`: load the submodule on use
                return importlib.import_module(full)
            try:
                return getattr(source, name)
            except AttributeError:
                raise AttributeError(
                    f"zmesh's Ray-compat module {module.__name__!r} has no attribute {name!r}; "
                    f"zmesh implements Ray Core's API, not all of Ray") from None

        module.__getattr__ = __getattr__  # type: ignore[method-assign]


class RayAliasFinder(_FinderBase):
    """Finds `ray` and its known submodules as aliases of zmesh modules."""

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != "ray" and not fullname.startswith("ray."):
            return None
        where = ALIASES.get(fullname)
        if where is None:
            return None  # an unknown ray submodule: the import fails with Python's usual error
        is_package = any(k.startswith(fullname + ".") for k in ALIASES)
        spec = importlib.machinery.ModuleSpec(fullname, _AliasLoader(where),
                                              is_package=is_package)
        if is_package:
            spec.submodule_search_locations = []
        return spec
