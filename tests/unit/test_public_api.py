"""The public surface is honest: `__all__` says what exists, Ray's names resolve, and the
top-level transports/ and serializers/ folders are only importable under zmesh."""

from __future__ import annotations
import __future__

import importlib
import inspect
import sys
import types
from pathlib import Path

import pytest

import zmesh

REPO = Path(__file__).resolve().parents[2]

# The Ray Core API a Ray program reaches through `import ray` (used as `import zmesh as ray`).
RAY_TOP_LEVEL = [
    "init", "shutdown", "is_initialized", "remote", "get", "put", "wait", "kill", "cancel",
    "get_actor", "get_runtime_context", "get_gpu_ids", "available_resources",
    "cluster_resources", "nodes", "method", "ObjectRef", "exceptions", "util",
]
RAY_EXCEPTIONS = [
    "RayError", "RaySystemError", "RayTaskError", "RayActorError", "ActorDiedError",
    "ActorUnavailableError", "GetTimeoutError", "ObjectLostError", "OwnerDiedError",
    "WorkerCrashedError", "NodeDiedError", "TaskCancelledError", "ObjectStoreFullError",
    "OutOfMemoryError", "RuntimeEnvSetupError", "LocalRayletDiedError",
    "ObjectFetchTimedOutError", "RaySerializationError",
]


def test_every_name_in_all_exists():
    missing = [name for name in zmesh.__all__ if not hasattr(zmesh, name)]
    assert not missing, f"zmesh.__all__ names that do not exist: {missing}"


def test_all_has_no_duplicates():
    assert len(zmesh.__all__) == len(set(zmesh.__all__))


def _is_typing_helper(name: str, value: object) -> bool:
    """`from __future__ import annotations`, `TYPE_CHECKING`, `Any`: not part of the API."""
    return (isinstance(value, __future__._Feature) or name == "TYPE_CHECKING"
            or getattr(value, "__module__", None) == "typing")


def test_every_public_non_module_name_is_in_all():
    public = {name for name, value in vars(zmesh).items()
              if not name.startswith("_") and not isinstance(value, types.ModuleType)
              and not _is_typing_helper(name, value)}
    assert public <= set(zmesh.__all__), f"public but not in __all__: {public - set(zmesh.__all__)}"


@pytest.mark.parametrize("name", RAY_TOP_LEVEL)
def test_ray_top_level_name_resolves(name):
    assert hasattr(zmesh, name), f"zmesh.{name} is missing (Ray programs use ray.{name})"


@pytest.mark.parametrize("name", RAY_EXCEPTIONS)
def test_ray_exception_name_resolves_to_an_exception_class(name):
    cls = getattr(zmesh.exceptions, name)
    assert inspect.isclass(cls) and issubclass(cls, Exception)
    assert issubclass(cls, zmesh.exceptions.RayError)


def test_ray_exception_hierarchy_matches_ray():
    e = zmesh.exceptions
    assert issubclass(e.ActorDiedError, e.RayActorError)
    assert issubclass(e.ActorUnavailableError, e.RayActorError)
    assert issubclass(e.OwnerDiedError, e.ObjectLostError)
    assert issubclass(e.GetTimeoutError, TimeoutError)  # Ray's GetTimeoutError is a TimeoutError


def test_exceptions_all_names_exist():
    assert all(hasattr(zmesh.exceptions, n) for n in zmesh.exceptions.__all__)


def test_placement_groups_and_strategies_resolve_under_ray_names():
    from zmesh.util.placement_group import PlacementGroup, placement_group, remove_placement_group
    from zmesh.util.scheduling_strategies import (
        NodeAffinitySchedulingStrategy,
        PlacementGroupSchedulingStrategy,
    )

    assert zmesh.util.placement_group is placement_group is zmesh.placement_group
    assert zmesh.util.remove_placement_group is remove_placement_group
    assert inspect.isclass(PlacementGroup)
    assert inspect.isclass(PlacementGroupSchedulingStrategy)
    assert inspect.isclass(NodeAffinitySchedulingStrategy)
    assert zmesh.util.scheduling_strategies.PlacementGroupSchedulingStrategy \
        is PlacementGroupSchedulingStrategy


def test_actor_module_has_rays_handle_names():
    from zmesh.actor import ActorClass, ActorHandle

    assert zmesh.ActorHandle is ActorHandle and zmesh.ActorClass is ActorClass


def test_method_decorator_accepts_num_returns():
    @zmesh.method(num_returns=2)
    def pair(self):
        return 1, 2

    assert callable(pair)


def test_version_is_a_string():
    assert isinstance(zmesh.__version__, str) and zmesh.__version__


@pytest.mark.parametrize("package", ["transports", "serializers"])
def test_top_level_folder_installs_under_zmesh(package):
    module = importlib.import_module(f"zmesh.{package}")
    assert module.__name__ == f"zmesh.{package}"
    assert Path(module.__file__).parent == REPO / package  # the editable install maps it


@pytest.mark.parametrize("package", ["transports", "serializers"])
def test_bare_import_from_repo_root_is_refused(package, monkeypatch):
    # `import serializers` from the repo root would load a second copy with its own registry
    monkeypatch.syspath_prepend(str(REPO))
    assert package not in sys.modules
    try:
        with pytest.raises(ImportError, match=f"import zmesh.{package}"):
            importlib.import_module(package)
    finally:
        sys.modules.pop(package, None)
