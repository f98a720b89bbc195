"""zmesh: a brokerless actor and task runtime for Python on ZeroMQ, in the family of Ray Core.

A Ray Core program runs with `import zmesh as ray`: the same names and semantics.

A node process (started with ZMESH_LAZY_IMPORT=1) loads the public names on first use, so
that it starts without importing the whole API; everyone else gets them at `import zmesh`,
so `init()` does not pay for the imports. The runtime's client is not among them: `init()`
imports it while its node process starts, when the driver would otherwise wait idle.
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any

from zmesh._version import __version__ as __version__

if TYPE_CHECKING:
    from zmesh import exceptions as exceptions
    from zmesh import util as util
    from zmesh.actor import ActorClass as ActorClass
    from zmesh.actor import ActorHandle as ActorHandle
    from zmesh.actor import method as method
    from zmesh.api import available_resources as available_resources
    from zmesh.api import cancel as cancel
    from zmesh.api import cluster_resources as cluster_resources
    from zmesh.api import get as get
    from zmesh.api import get_actor as get_actor
    from zmesh.api import init as init
    from zmesh.api import is_initialized as is_initialized
    from zmesh.api import kill as kill
    from zmesh.api import nodes as nodes
    from zmesh.api import put as put
    from zmesh.api import remote as remote
    from zmesh.api import shutdown as shutdown
    from zmesh.api import timeline as timeline
    from zmesh.api import wait as wait
    from zmesh.generators import ObjectRefGenerator as ObjectRefGenerator
    from zmesh.object_ref import ObjectRef as ObjectRef
    from zmesh.runtime_context import get_gpu_ids as get_gpu_ids
    from zmesh.runtime_context import get_runtime_context as get_runtime_context
    from zmesh.serializers import register_serializer as register_serializer
    from zmesh.util.placement_group import placement_group as placement_group
    from zmesh.util.placement_group import remove_placement_group as remove_placement_group

# public name -> the module that defines it
_WHERE = {
    "ActorClass": "zmesh.actor",
    "ActorHandle": "zmesh.actor",
    "method": "zmesh.actor",
    "available_resources": "zmesh.api",
    "cancel": "zmesh.api",
    "cluster_resources": "zmesh.api",
    "get": "zmesh.api",
    "get_actor": "zmesh.api",
    "init": "zmesh.api",
    "is_initialized": "zmesh.api",
    "kill": "zmesh.api",
    "nodes": "zmesh.api",
    "put": "zmesh.api",
    "remote": "zmesh.api",
    "shutdown": "zmesh.api",
    "timeline": "zmesh.api",
    "wait": "zmesh.api",
    "ObjectRef": "zmesh.object_ref",
    "ObjectRefGenerator": "zmesh.generators",
    "get_gpu_ids": "zmesh.runtime_context",
    "get_runtime_context": "zmesh.runtime_context",
    "register_serializer": "zmesh.serializers",
    "placement_group": "zmesh.util.placement_group",
    "remove_placement_group": "zmesh.util.placement_group",
}
_SUBMODULES = {"exceptions", "util"}

__all__ = [
    "ActorClass",
    "ActorHandle",
    "ObjectRef",
    "ObjectRefGenerator",
    "__version__",
    "available_resources",
    "cancel",
    "cluster_resources",
    "exceptions",
    "get",
    "get_actor",
    "get_gpu_ids",
    "get_runtime_context",
    "init",
    "is_initialized",
    "kill",
    "method",
    "nodes",
    "placement_group",
    "put",
    "register_serializer",
    "remote",
    "remove_placement_group",
    "shutdown",
    "timeline",
    "util",
    "wait",
]


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        module = importlib.import_module(f"zmesh.{name}")
        globals()[name] = module
        return module
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'zmesh' has no attribute {name!r}")
    value = getattr(importlib.import_module(where), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if not os.environ.get("ZMESH_LAZY_IMPORT"):
    for _name in (*_WHERE, *_SUBMODULES):
        __getattr__(_name)
