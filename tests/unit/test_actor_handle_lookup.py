"""`handle.method` on an ActorHandle: a property of a per-method-set subclass (no failed
attribute lookup per call), answering exactly as `__getattr__` does."""

from __future__ import annotations

import pickle

import pytest

from zmesh.actor import ActorHandle, ActorMethod


def _handle(methods: dict[str, int]) -> ActorHandle:
    return ActorHandle(b"a" * 16, "Counter", methods)


def test_a_method_of_the_actor_is_found_with_its_number_of_returns():
    h = _handle({"incr": 1, "pair": 2})
    assert isinstance(h.incr, ActorMethod) and h.incr._num_returns == 1
    assert h.pair._num_returns == 2 and h.pair._handle is h
    assert "incr" not in vars(h)  # made per access: no handle <-> method cycle


def test_handles_of_one_method_set_share_a_subclass_that_reads_as_actor_handle():
    a, b, c = _handle({"incr": 1}), _handle({"incr": 1}), _handle({"decr": 1})
    assert type(a) is type(b) and type(a) is not type(c)
    assert isinstance(a, ActorHandle) and type(a).__name__ == "ActorHandle"
    assert a == ActorHandle(b"a" * 16, "Counter", {}) and hash(a) == hash(c)


def test_unknown_names_and_handle_fields_behave_as_before():
    h = _handle({"incr": 1})
    with pytest.raises(AttributeError, match="actor Counter has no method 'nope'"):
        h.nope  # noqa: B018
    with pytest.raises(AttributeError):
        h.__missing_dunder__  # noqa: B018
    assert h.__ray_terminate__._name == "__ray_terminate__"
    assert h._class_name == "Counter"  # a field, not a method


def test_a_method_named_like_a_handle_attribute_is_left_to_the_handle():
    h = _handle({"_record": 1, "incr": 1})
    assert not isinstance(h._record, ActorMethod)  # ActorHandle's own, as before
    assert isinstance(h.incr, ActorMethod)


def test_a_handle_without_its_method_table_resolves_any_name():
    h = ActorHandle(b"a" * 16, "Counter", {})
    assert type(h) is ActorHandle and h.anything._num_returns == 1


def test_a_pickled_handle_comes_back_with_its_methods():
    h = pickle.loads(pickle.dumps(_handle({"incr": 1, "pair": 2})))
    assert isinstance(h, ActorHandle) and h.pair._num_returns == 2
