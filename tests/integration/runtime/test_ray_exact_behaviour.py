"""Where zmesh must behave exactly as Ray: argument checking at .remote(), auto-init,
exceptions that cannot be subclassed, was_current_actor_reconstructed.

Each test says which Ray document or Ray-observed behaviour (Ray 2.60) it follows.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

import zmesh
from zmesh.exceptions import RayTaskError


def test_remote_function_with_arguments_that_do_not_fit_fails_at_remote(ray):
    # Ray-observed (signature.flatten_args): f.remote() binds the arguments to the function's
    # signature and raises TypeError at once, before any task is submitted
    @ray.remote
    def f(a, b, *, c=1):
        return a + b + c

    with pytest.raises(TypeError, match="missing a required argument: 'b'"):
        f.remote(1)
    with pytest.raises(TypeError, match="too many positional arguments"):
        f.remote(1, 2, 3)
    with pytest.raises(TypeError, match="unexpected keyword argument 'd'"):
        f.remote(1, 2, d=4)
    assert ray.get(f.remote(1, 2, c=3)) == 6


def test_actor_constructor_arguments_are_checked_at_remote(ray):
    # Ray-observed: ActorClass.remote() binds to __init__'s signature (TypeError at once)
    @ray.remote
    class Counter:
        def __init__(self, start):
            self.n = start

        def get(self):
            return self.n

    with pytest.raises(TypeError, match="missing a required argument: 'start'"):
        Counter.remote()
    assert ray.get(Counter.remote(5).get.remote()) == 5


def test_memory_error_in_a_task_reaches_the_caller_as_a_task_error(ray):
    # Ray's RayTaskError.as_instanceof_cause: when the cause's class cannot be combined with
    # RayTaskError (MemoryError refuses a derived __new__), get raises the RayTaskError itself,
    # carrying the original exception as .cause and its traceback in the message
    @ray.remote
    def oom():
        raise MemoryError("too big to hold")

    with pytest.raises(RayTaskError) as info:
        ray.get(oom.remote())
    assert isinstance(info.value.cause, MemoryError)
    assert "too big to hold" in str(info.value)


def test_was_current_actor_reconstructed_tells_the_truth(ray):
    # Ray's RuntimeContext.was_current_actor_reconstructed: False in the first incarnation,
    # True after a restart (max_restarts; ray.kill(no_restart=False) restarts it)
    @ray.remote(max_restarts=1)
    class Phoenix:
        def reconstructed(self):
            return ray.get_runtime_context().was_current_actor_reconstructed

    a = Phoenix.remote()
    assert ray.get(a.reconstructed.remote()) is False
    ray.kill(a, no_restart=False)
    assert ray.get(a.reconstructed.remote(), timeout=60) is True
    ray.kill(a)


def _run(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=120)


def test_api_before_init_starts_a_private_runtime_with_rays_log_line():
    # Ray-observed: ray.get/put/remote before ray.init() auto-initialise a local instance and
    # log "Started a local Ray instance."
    env = {k: v for k, v in os.environ.items() if k != "ZMESH_ADDRESS"}
    proc = _run("""
        import zmesh

        @zmesh.remote
        def f(x):
            return x + 1

        print(zmesh.get(f.remote(1)), zmesh.is_initialized())
        zmesh.shutdown()
    """, env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["2", "True"]
    assert "Started a local zmesh instance." in proc.stderr


def test_zmesh_address_chooses_the_mesh_auto_init_joins(ray):
    # Ray-observed: with RAY_ADDRESS set, auto-init connects to that cluster ("Connecting to
    # existing Ray cluster at address: ..."): the program sees that cluster's named actors
    @ray.remote
    class Marker:
        def where(self):
            return "the shared mesh"

    marker = Marker.options(name="everyday-marker", lifetime="detached").remote()
    assert ray.get(marker.where.remote()) == "the shared mesh"
    address = zmesh.api._state["info"]["address"]
    env = dict(os.environ, ZMESH_ADDRESS=address)
    proc = _run("""
        import zmesh

        print(zmesh.get(zmesh.get_actor("everyday-marker").where.remote()))
        zmesh.shutdown()
    """, env)
    ray.kill(marker)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "the shared mesh"
    assert "Connecting to existing zmesh mesh at address" in proc.stderr


def test_ray_address_chooses_the_mesh_in_ray_compat_mode(ray):
    # Ray-observed: RAY_ADDRESS names the cluster that (auto-)init joins; in Ray-compat mode
    # (`import ray` is zmesh) zmesh honours it too
    @ray.remote
    class Marker:
        def where(self):
            return "found through RAY_ADDRESS"

    marker = Marker.options(name="everyday-ray-address", lifetime="detached").remote()
    ray.get(marker.where.remote())
    env = {k: v for k, v in os.environ.items() if k != "ZMESH_ADDRESS"}
    env["RAY_ADDRESS"] = zmesh.api._state["info"]["address"]
    proc = _run("""
        import zmesh.ray_compat
        zmesh.ray_compat.install()
        import ray

        print(ray.get(ray.get_actor("everyday-ray-address").where.remote()))
        ray.shutdown()
    """, env)
    ray.kill(marker)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "found through RAY_ADDRESS"
