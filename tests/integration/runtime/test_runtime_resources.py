"""Resources on one node: CPUs, GPUs declared on a machine without any, custom and fractional
resources, what `available_resources`/`cluster_resources`/`nodes` report, and requests that
no node can fit (pending, but never silently)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest
from runtime_fixtures import wait_until

import zmesh


@pytest.fixture(scope="module")
def ray() -> Iterator[object]:
    """A node with 2 CPUs, 2 (declared) GPUs and 2 units of a custom resource 'accel'."""
    zmesh.init(num_cpus=2, num_gpus=2, resources={"accel": 2})
    yield zmesh
    zmesh.shutdown()


def settled(ray, **expected: float) -> bool:
    """True once available resources show `expected` (releases reach the node a bit later)."""
    avail = ray.available_resources()
    return all(avail.get(k, 0.0) == v for k, v in expected.items())


def test_cluster_resources_report_what_init_declared(ray):
    total = ray.cluster_resources()
    assert total["CPU"] == 2 and total["GPU"] == 2 and total["accel"] == 2
    assert total["memory"] > 0 and total["object_store_memory"] > 0
    assert wait_until(lambda: settled(ray, CPU=2, GPU=2, accel=2))


def test_nodes_lists_this_node_alive_with_its_resources(ray):
    (node,) = ray.nodes()
    assert node["Alive"] is True
    assert node["NodeID"] == ray.get_runtime_context().get_node_id()
    assert node["Resources"]["GPU"] == 2 and node["Resources"]["accel"] == 2
    assert node["Resources"][f"node:{node['NodeID']}"] == 1


def test_a_gpu_task_sees_one_gpu_in_cuda_visible_devices(ray):
    @ray.remote(num_gpus=1)
    def visible():
        return os.environ.get("CUDA_VISIBLE_DEVICES"), ray.get_gpu_ids()

    @ray.remote
    def cpu_only():
        return os.environ.get("CUDA_VISIBLE_DEVICES"), ray.get_gpu_ids()

    devices, ids = ray.get(visible.remote())
    assert devices in ("0", "1")
    assert ids == [int(devices)]
    assert ray.get(cpu_only.remote()) == (None, [])


def test_gpu_actors_get_distinct_gpus_and_hold_them_while_alive(ray):
    @ray.remote(num_gpus=1)
    class GpuUser:
        def ids(self):
            return os.environ["CUDA_VISIBLE_DEVICES"], ray.get_gpu_ids()

    a, b = GpuUser.remote(), GpuUser.remote()
    (da, ia), (db, ib) = ray.get([a.ids.remote(), b.ids.remote()])
    assert {da, db} == {"0", "1"}
    assert ia == [int(da)] and ib == [int(db)]
    assert "GPU" not in ray.available_resources() or ray.available_resources()["GPU"] == 0
    ray.kill(a)
    ray.kill(b)
    assert wait_until(lambda: settled(ray, GPU=2))


def test_fractional_gpus_let_two_actors_share_one_gpu(ray):
    @ray.remote(num_gpus=0.5)
    class Half:
        def ids(self):
            return ray.get_gpu_ids()

    a, b = Half.remote(), Half.remote()
    ids_a, ids_b = ray.get([a.ids.remote(), b.ids.remote()])
    assert len(ids_a) == 1 and ids_a == ids_b
    assert wait_until(lambda: settled(ray, GPU=1))
    ray.kill(a)
    ray.kill(b)
    assert wait_until(lambda: settled(ray, GPU=2))


def test_custom_and_fractional_resources_are_held_by_an_actor_and_freed_at_kill(ray):
    @ray.remote(resources={"accel": 0.5}, num_cpus=0.5)
    class Accel:
        def ping(self):
            return "pong"

    actor = Accel.remote()
    assert ray.get(actor.ping.remote()) == "pong"
    assert wait_until(lambda: settled(ray, accel=1.5, CPU=1.5))
    ray.kill(actor)
    assert wait_until(lambda: settled(ray, accel=2, CPU=2))


def test_a_custom_resource_task_runs_and_releases_it(ray):
    @ray.remote(resources={"accel": 2})
    def uses_all():
        return "ran"

    assert ray.get([uses_all.remote() for _ in range(3)]) == ["ran"] * 3
    assert wait_until(lambda: settled(ray, accel=2))


def test_tasks_needing_more_than_free_wait_for_resources_then_run(ray):
    @ray.remote(num_cpus=0, resources={"accel": 2})
    class Hog:
        def ping(self):
            return 1

    @ray.remote(resources={"accel": 1})
    def needs_accel():
        return "ran"

    hog = Hog.remote()
    ray.get(hog.ping.remote())
    ref = needs_accel.remote()
    ready, _ = ray.wait([ref], timeout=0.3)
    assert ready == []  # the actor holds every 'accel'
    ray.kill(hog)
    assert ray.get(ref, timeout=10) == "ran"


def test_bad_resource_requests_are_refused_with_a_clear_error(ray):
    with pytest.raises(ValueError, match="num_cpus"):
        @ray.remote(num_cpus=-1)
        def negative():
            return 1

        negative.remote()


def test_runtime_context_knows_the_node_and_job(ray):
    @ray.remote
    def where():
        ctx = ray.get_runtime_context()
        return ctx.get_node_id(), ctx.get_job_id(), ctx.get_task_id()

    node_id, job_id, task_id = ray.get(where.remote())
    ctx = ray.get_runtime_context()
    assert node_id == ctx.get_node_id() and job_id == ctx.get_job_id()
    assert task_id and ctx.get_task_id() is None


INFEASIBLE_DRIVER = textwrap.dedent("""
    import sys
    import zmesh

    zmesh.init(num_cpus=1)

    @zmesh.remote(resources={"tpu_pod": 4})
    def train():
        return 1

    ref = train.remote()
    sys.stderr.write("SUBMITTED\\n")  # one write: the node's warning may print meanwhile
    try:
        zmesh.get(ref, timeout=1.0)
    except zmesh.exceptions.GetTimeoutError as exc:
        sys.stderr.write("TIMEOUT " + str(exc) + "\\n")
    zmesh.shutdown()
""")


def test_an_infeasible_task_warns_the_driver_within_a_second_and_get_says_why():
    out = subprocess.run([sys.executable, "-c", INFEASIBLE_DRIVER], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stderr.splitlines()
    submitted = lines.index("SUBMITTED")
    timeout_line = next(i for i, ln in enumerate(lines) if ln.startswith("TIMEOUT "))
    warnings = [i for i, ln in enumerate(lines) if ln.startswith("zmesh warning:")]
    assert warnings, out.stderr
    warning = lines[warnings[0]]
    # printed before the 1 s get timed out (it may even beat the driver's own SUBMITTED line:
    # the node answers the lease request from another thread)
    assert submitted < timeout_line and warnings[0] < timeout_line, out.stderr
    assert "train" in warning and "tpu_pod" in warning
    message = lines[timeout_line]
    assert "infeasible" in message and "tpu_pod" in message and "train" in message


def test_an_infeasible_actor_warns_and_its_calls_time_out_saying_why(ray, capfd):
    @ray.remote(num_gpus=8)
    class Huge:
        def ping(self):
            return 1

    huge = Huge.remote()
    with pytest.raises(zmesh.exceptions.GetTimeoutError, match="GPU"):
        ray.get(huge.ping.remote(), timeout=1.0)
    assert "Huge" in capfd.readouterr().err
    ray.kill(huge)
