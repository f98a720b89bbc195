"""Ray-compat aliases in one process: which `ray.*` names resolve to which zmesh objects,
and actor classes and handles answering as Ray's do (no runtime needed)."""

from __future__ import annotations

import pickle
import sys

import cloudpickle
import pytest

import zmesh
from zmesh import ray_compat
from zmesh.actor import ActorHandle


@pytest.fixture
def compat():
    was = ray_compat.is_installed()
    ray_compat.install()
    yield
    if not was:
        ray_compat.uninstall()


def test_ray_names_are_zmesh_objects(compat):
    import ray
    import ray.actor
    import ray.exceptions
    import ray.util
    from ray._private import state as private_state
    from ray.experimental.state.api import get_actor
    from ray.util.placement_group import PlacementGroup, placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    assert ray.get is zmesh.get and ray.remote is zmesh.remote
    assert ray.ObjectRef is zmesh.ObjectRef
    assert ray.actor.ActorHandle is zmesh.ActorHandle
    assert ray.exceptions.RayActorError is zmesh.exceptions.RayActorError
    assert ray.util.get_node_ip_address is zmesh.util.get_node_ip_address
    assert ray.util.list_named_actors is zmesh.util.list_named_actors
    assert get_actor is zmesh.util.state.get_actor
    assert ray.util.state.get_actor is zmesh.util.state.get_actor
    assert private_state.available_resources_per_node is \
        zmesh.util.state.available_resources_per_node
    assert callable(private_state.state.placement_group_table)
    assert PlacementGroup is zmesh.util.PlacementGroup
    assert placement_group is zmesh.util.placement_group
    assert ray.util.placement_group is zmesh.util.placement_group  # the function, not a module
    assert PlacementGroupSchedulingStrategy is \
        zmesh.util.scheduling_strategies.PlacementGroupSchedulingStrategy


def test_unknown_ray_attribute_says_what_zmesh_implements(compat):
    import ray

    with pytest.raises(AttributeError, match="Ray Core's API"):
        ray.data  # noqa: B018


def test_alias_modules_pickle_by_name(compat):
    import ray

    def uses_ray():
        return ray.get

    assert cloudpickle.loads(cloudpickle.dumps(uses_ray))() is zmesh.get
    assert pickle.loads(pickle.dumps(ray)) is sys.modules["ray"]


def test_uninstall_forgets_the_aliases():
    ray_compat.install()
    import ray  # noqa: F401

    ray_compat.uninstall()
    assert "ray" not in sys.modules
    assert not ray_compat.is_installed()


class Model:
    label = "a class attribute"

    def forward(self):
        return 1

    def _helper(self):
        return 2


def test_actor_class_answers_dir_and_getattr_with_the_users_class():
    cls = zmesh.remote(Model)
    assert {"forward", "_helper", "label", "remote", "options"} <= set(dir(cls))
    assert cls.label == "a class attribute"
    assert cls.forward.__wrapped__ is Model.forward  # a wrapper: see ActorClass.__getattr__
    assert cls.__ray_actor_class__ is Model
    assert cls.options(num_cpus=2).__ray_actor_class__ is Model
    with pytest.raises(AttributeError, match="has no attribute 'missing'"):
        cls.missing  # noqa: B018


def test_handles_call_underscore_methods_but_not_dunders():
    handle = ActorHandle(b"\x01" * 16, "Model", {"forward": 1, "_helper": 1})
    assert handle._helper._name == "_helper"
    assert handle._actor_id.hex() == "01" * 16
    with pytest.raises(AttributeError):
        handle.__deepcopy_hook__  # noqa: B018
    with pytest.raises(AttributeError, match="no method 'other'"):
        handle.other  # noqa: B018
