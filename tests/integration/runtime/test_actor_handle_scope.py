"""A non-detached actor lives while a handle to it does, in any process (Ray's actor handle
reference counting): when the last handle goes, it exits and frees its resources and name.
It did not: a named actor outlived every handle."""

from __future__ import annotations

import gc
import os

import psutil
import pytest
from runtime_fixtures import wait_until

import zmesh


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def name_is_free(name: str) -> bool:
    try:
        zmesh.get_actor(name)
    except ValueError:
        return True
    return False


@zmesh.remote
class Named:
    def pid(self):
        return os.getpid()

    def hold(self, handle):
        self.held = handle
        return True

    def ask(self):
        return zmesh.get(self.held.pid.remote())


def test_a_named_actor_exits_and_frees_its_name_when_its_last_handle_goes(ray):
    handle = Named.options(name="scoped").remote()
    pid = ray.get(handle.pid.remote())
    del handle
    gc.collect()
    assert wait_until(lambda: gone(pid), timeout=60), "the actor outlived its last handle"
    assert wait_until(lambda: name_is_free("scoped"), timeout=60)
    again = Named.options(name="scoped").remote()  # the name can be taken again
    assert ray.get(again.pid.remote()) != pid


def test_a_handle_held_by_another_actor_keeps_the_actor_alive(ray):
    target = Named.remote()
    pid = ray.get(target.pid.remote())
    holder = Named.remote()
    assert ray.get(holder.hold.remote(target))
    del target
    gc.collect()
    assert ray.get(holder.ask.remote(), timeout=60) == pid
    del holder  # the holder exits, and with it the last handle to the target
    gc.collect()
    assert wait_until(lambda: gone(pid), timeout=60)


def test_calls_made_on_a_temporary_handle_still_complete(ray):
    assert ray.get(Named.remote().pid.remote(), timeout=60) > 0


def test_a_detached_actor_outlives_its_handles(ray):
    handle = Named.options(name="kept", lifetime="detached").remote()
    pid = ray.get(handle.pid.remote())
    del handle
    gc.collect()
    kept = ray.get_actor("kept")
    assert ray.get(kept.pid.remote()) == pid
    ray.kill(kept)
    with pytest.raises(zmesh.exceptions.ActorDiedError):
        ray.get(kept.pid.remote(), timeout=60)
