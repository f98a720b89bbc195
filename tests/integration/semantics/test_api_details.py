"""Ray Core API details: runtime context, ids, actor classes, kill/wait/remote edge cases,
name and namespace validation, error class names, `testing.Cluster().address`.

Each test says where its expectation comes from: Ray's documentation ("docs") or Ray's
source / observed behaviour of Ray 2.x ("ray source", with the function it is read from).
"""

from __future__ import annotations

import asyncio

import pytest


def test_runtime_context_get_returns_ids_dict(ray):
    # ray source: RuntimeContext.get() -> {"job_id", "node_id", "namespace", ["task_id"],
    # ["actor_id"]}; in a task the task id is there, in the driver it is not.
    ctx = ray.get_runtime_context().get()
    assert {"job_id", "node_id", "namespace"} <= set(ctx)
    assert "task_id" not in ctx and "actor_id" not in ctx

    @ray.remote
    def inside():
        return ray.get_runtime_context().get()

    remote_ctx = ray.get(inside.remote(), timeout=30)
    assert remote_ctx["task_id"] is not None
    assert remote_ctx["node_id"] == ctx["node_id"]


def test_runtime_context_ids_have_hex(ray):
    # docs: RuntimeContext.node_id / job_id / task_id / actor_id are id objects with .hex(),
    # and .hex() equals the get_*_id() strings.
    ctx = ray.get_runtime_context()
    assert ctx.node_id.hex() == ctx.get_node_id()
    assert ctx.job_id.hex() == ctx.get_job_id()

    @ray.remote
    class A:
        def ids(self):
            c = ray.get_runtime_context()
            return c.actor_id.hex(), c.get_actor_id(), c.task_id.hex(), c.get_task_id()

    actor_hex, actor_str, task_hex, task_str = ray.get(A.remote().ids.remote(), timeout=30)
    assert actor_hex == actor_str and task_hex == task_str


def test_current_actor_is_a_handle_to_itself(ray):
    # docs: RuntimeContext.current_actor, "the current actor handle of this actor itself";
    # ray source: outside an actor it raises RuntimeError.
    @ray.remote
    class Me:
        def __init__(self):
            self.n = 0

        def me(self):
            return ray.get_runtime_context().current_actor

        def bump(self):
            self.n += 1
            return self.n

    a = Me.remote()
    handle = ray.get(a.me.remote(), timeout=30)
    assert handle == a
    assert ray.get(handle.bump.remote(), timeout=30) == 1
    with pytest.raises(RuntimeError):
        _ = ray.get_runtime_context().current_actor


def test_object_ref_and_actor_ids_hex(ray):
    # docs: ObjectRef.hex(); ray source: ActorHandle._actor_id.hex()
    ref = ray.put(1)
    assert isinstance(ref.hex(), str) and int(ref.hex(), 16) >= 0

    @ray.remote
    class A:
        def aid(self):
            return ray.get_runtime_context().get_actor_id()

    a = A.remote()
    assert a._actor_id.hex() == ray.get(a.aid.remote(), timeout=30)


def test_actor_class_exposes_class_attributes(ray):
    # ray source (ActorClass.__getattr__ / test_actor.py::test_actor_class_attributes):
    # class attributes and static methods of the decorated class are reachable on it.
    @ray.remote
    class Config:
        LIMIT = 7
        names = ("a", "b")

        @staticmethod
        def double(x):
            return 2 * x

        def get(self):
            return self.LIMIT

    assert Config.LIMIT == 7
    assert Config.names == ("a", "b")
    assert Config.double(4) == 8
    with pytest.raises(AttributeError):
        _ = Config.no_such_attribute
    assert ray.get(Config.remote().get.remote(), timeout=30) == 7


def test_kill_of_a_non_handle_raises_value_error(ray):
    # ray source (worker.kill): "ray.kill() only supported for actors" -> ValueError
    @ray.remote
    def f():
        return 1

    with pytest.raises(ValueError, match="actor"):
        ray.kill(f.remote())
    with pytest.raises(ValueError):
        ray.kill("not an actor")


def test_cancel_of_a_non_ref_raises_type_error(ray):
    # ray source (worker.cancel): "ray.cancel() only supported for object refs" -> TypeError
    with pytest.raises(TypeError):
        ray.cancel("nope")


def test_wait_on_an_empty_list_returns_two_empty_lists(ray):
    # ray source (worker.wait): `if len(object_refs) == 0: return [], []`
    assert ray.wait([]) == ([], [])
    assert ray.wait([], timeout=0) == ([], [])


def test_remote_with_empty_parentheses(ray):
    # observed Ray behaviour: ray.remote() with empty parentheses is refused with the
    # "must be applied either with no arguments and no parentheses" message.
    with pytest.raises(AssertionError, match="no arguments and no parentheses"):
        @ray.remote()
        class A:
            pass


def test_async_def_remote_function_is_refused(ray):
    # observed Ray 2.60 (tools/ray_parity.py): `@ray.remote` on an `async def` function raises
    # ValueError("'async def' should not be used for remote tasks ..."); async actors are the
    # way to run coroutines.
    async def add(x, y):
        await asyncio.sleep(0)
        return x + y

    with pytest.raises(ValueError, match="async def"):
        ray.remote(add)
    with pytest.raises(ValueError, match="async def"):
        ray.remote(num_cpus=1)(add)


def test_invalid_namespaces_and_names_are_refused(ray):
    # ray source (_private/utils.validate_namespace, actor.ActorClass._remote, get_actor):
    # a non-str namespace -> TypeError, "" -> ValueError; a non-str actor name -> TypeError,
    # "" -> ValueError; get_actor("") -> ValueError.
    @ray.remote
    class A:
        pass

    with pytest.raises(TypeError):
        A.options(name=5).remote()
    with pytest.raises(ValueError):
        A.options(name="").remote()
    with pytest.raises(TypeError):
        A.options(name="x", namespace=3).remote()
    with pytest.raises(ValueError):
        A.options(name="x", namespace="").remote()
    with pytest.raises(ValueError):
        ray.get_actor("")
    with pytest.raises(TypeError):
        ray.get_actor("x", namespace=3)
    with pytest.raises(ValueError):
        ray.get_actor("x", namespace="")


def test_task_error_class_name_reads_as_ray(ray):
    # observed Ray behaviour: the raised class is named "RayTaskError(ValueError)"
    @ray.remote
    def boom():
        raise ValueError("bad")

    with pytest.raises(ValueError) as info:
        ray.get(boom.remote(), timeout=30)
    assert type(info.value).__name__ == "RayTaskError(ValueError)"
    assert repr(info.value).startswith("RayTaskError(ValueError)(")
    assert isinstance(info.value, ray.exceptions.RayTaskError)


def test_cluster_address_before_any_node_is_none():
    # ray source (cluster_utils.Cluster.address -> self.gcs_address, None until the head
    # node is added)
    from zmesh.testing import Cluster

    cluster = Cluster()
    try:
        assert cluster.address is None
    finally:
        cluster.shutdown()


def test_num_returns_zero_returns_none_and_the_call_still_runs(ray, tmp_path):
    # ray source (RemoteFunction._remote / ActorMethod._remote): with num_returns=0,
    # .remote() returns None; the task or call runs for its effects.
    from runtime_fixtures import wait_until

    @ray.remote(num_returns=0)
    def touch(path):
        open(path, "w").close()

    @ray.remote
    class Toucher:
        @ray.method(num_returns=0)
        def touch(self, path):
            open(path, "w").close()

        def ping(self):
            return "pong"

    assert touch.remote(str(tmp_path / "task")) is None
    assert wait_until((tmp_path / "task").exists, timeout=30)
    t = Toucher.remote()
    assert t.touch.remote(str(tmp_path / "call")) is None
    assert ray.get(t.ping.remote(), timeout=30) == "pong"  # (calls run in order)
    assert (tmp_path / "call").exists()


def test_placement_group_strategy_without_a_group_is_the_default(ray):
    # ray source (PlacementGroupSchedulingStrategy with placement_group=None): no group,
    # the way a task leaves its parent's captured group.
    from zmesh.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    @ray.remote
    def one():
        return 1

    strategy = PlacementGroupSchedulingStrategy(None)
    assert ray.get(one.options(scheduling_strategy=strategy).remote(), timeout=30) == 1
