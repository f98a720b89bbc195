"""zmesh: a brokerless actor and task runtime for Python on ZeroMQ, in the family of Ray Core.

A Ray Core program runs with `import zmesh as ray`: the same names and semantics.
"""

from zmesh import exceptions, util
from zmesh._version import __version__
from zmesh.actor import ActorClass, ActorHandle, method
from zmesh.api import (
    available_resources,
    cancel,
    cluster_resources,
    get,
    get_actor,
    init,
    is_initialized,
    kill,
    nodes,
    put,
    remote,
    shutdown,
    wait,
)
from zmesh.object_ref import ObjectRef
from zmesh.runtime_context import get_gpu_ids, get_runtime_context
from zmesh.serializers import register_serializer
from zmesh.util.placement_group import placement_group, remove_placement_group

__all__ = [
    "ActorClass",
    "ActorHandle",
    "ObjectRef",
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
    "util",
    "wait",
]
