"""Leases under blocking, zero-CPU work and crashes (issues 8 and 13): written from Ray's
documentation (Ray's quick-sort pattern; "num_cpus=0"; blocked workers lend their CPU; actors
take 1 CPU to schedule and 0 to run; max_calls; OMP_NUM_THREADS) and Ray's observed behaviour."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from runtime_fixtures import wait_until

import zmesh

BARRIER_S = 60.0


@pytest.fixture(scope="module")
def ray() -> Iterator[object]:
    """One node with 2 CPUs and 1 (declared) GPU."""
    zmesh.init(num_cpus=2, num_gpus=1)
    yield zmesh
    zmesh.shutdown()


def settled(ray, **expected: float) -> bool:
    avail = ray.available_resources()
    return all(avail.get(k, 0.0) == v for k, v in expected.items())


def test_a_chain_passing_refs_survives_its_worker_being_killed(ray, tmp_path):
    go, killed = str(tmp_path / "go"), str(tmp_path / "killed")

    @ray.remote(max_retries=3)
    def step(x: int) -> int:
        if x == 0 and not os.path.exists(killed):
            deadline = time.monotonic() + BARRIER_S
            while not os.path.exists(go) and time.monotonic() < deadline:
                time.sleep(0.01)
            Path(killed).touch()
            os.kill(os.getpid(), signal.SIGKILL)  # the rest of the chain is in flight here
        return x + 1

    assert ray.get(step.remote(100), timeout=60) == 101  # a lease to pipeline the chain to
    ref = step.remote(0)
    for _ in range(5):
        ref = step.remote(ref)
    Path(go).touch()
    assert ray.get(ref, timeout=60) == 6


def test_ray_quick_sort_fans_out_deeper_than_the_cpu_count(ray):
    import random

    @ray.remote
    def quick_sort(collection: list[int]) -> list[int]:
        if len(collection) <= 200:
            return sorted(collection)
        pivot = collection[0]
        less = [x for x in collection[1:] if x <= pivot]
        greater = [x for x in collection[1:] if x > pivot]
        lesser_ref, greater_ref = quick_sort.remote(less), quick_sort.remote(greater)
        return ray.get(lesser_ref) + [pivot] + ray.get(greater_ref)

    items = [random.randint(0, 10_000) for _ in range(1000)]
    assert ray.get(quick_sort.remote(items), timeout=60) == sorted(items)
    assert wait_until(lambda: settled(ray, CPU=2, GPU=1), timeout=30)


def test_wait_inside_a_task_lends_its_cpu_like_get(ray):
    @ray.remote
    def leaf(i: int) -> int:
        return i

    @ray.remote(max_calls=1)  # one task per worker, so the two hold both CPUs
    def fan(n: int) -> int:
        refs = [leaf.remote(i) for i in range(n)]
        ready, _ = ray.wait(refs, num_returns=n)
        return sum(ray.get(ready))

    # two outer tasks hold both CPUs and wait for leaves that need a CPU each
    assert ray.get([fan.remote(3), fan.remote(4)], timeout=60) == [3, 6]
    assert wait_until(lambda: settled(ray, CPU=2), timeout=30)


def test_six_zero_cpu_tasks_run_together_on_two_cpus(ray, tmp_path):
    @ray.remote(num_cpus=0)
    def meet(directory: str, i: int) -> bool:
        Path(directory, str(i)).touch()  # a file barrier: all six must run at once
        deadline = time.monotonic() + 60.0
        while time.monotonic() < deadline:
            if len(os.listdir(directory)) >= 6:
                return True
            time.sleep(0.01)
        return False

    assert ray.get([meet.remote(str(tmp_path), i) for i in range(6)], timeout=120) == [True] * 6
    assert wait_until(lambda: settled(ray, CPU=2), timeout=30)


def test_a_zero_cpu_actor_starts_while_every_cpu_is_busy(ray, tmp_path):
    release = str(tmp_path / "release")

    @ray.remote(max_calls=1)  # one task per worker, so the two hold both CPUs
    def hold(path: str) -> bool:
        deadline = time.monotonic() + BARRIER_S
        while not os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.01)
        return True

    @ray.remote(num_cpus=0)
    class Free:
        def ping(self) -> str:
            return "pong"

    busy = [hold.remote(release) for _ in range(2)]
    assert wait_until(lambda: settled(ray, CPU=0), timeout=30)
    actor = Free.remote()  # Ray: an explicit num_cpus=0 needs no CPU to be placed either
    try:
        assert ray.get(actor.ping.remote(), timeout=30) == "pong"
    finally:
        Path(release).touch()
    assert ray.get(busy, timeout=60) == [True, True]
    ray.kill(actor)
    assert wait_until(lambda: settled(ray, CPU=2), timeout=30)


def test_a_blocked_gpu_task_keeps_its_gpu(ray, tmp_path):
    """Only the CPU is lent while a task blocks: a second num_gpus=1 task must not get the
    same GPU id in the meantime."""
    a_done, b_started = str(tmp_path / "a_done"), str(tmp_path / "b_started")

    @ray.remote(num_cpus=0)
    def inner() -> None:
        deadline = time.monotonic() + 3.0  # long enough for a wrongly started B to show up
        while not os.path.exists(b_started) and time.monotonic() < deadline:
            time.sleep(0.01)

    @ray.remote(num_gpus=1)
    def a() -> str:
        ray.get(inner.remote())
        Path(a_done).touch()
        return os.environ["CUDA_VISIBLE_DEVICES"]

    @ray.remote(num_gpus=1)
    def b() -> tuple[str, bool]:
        Path(b_started).touch()
        return os.environ["CUDA_VISIBLE_DEVICES"], os.path.exists(a_done)

    ref_a = a.remote()
    assert wait_until(lambda: settled(ray, GPU=0), timeout=30)
    ref_b = b.remote()
    assert ray.get(ref_a, timeout=60) == "0"
    assert ray.get(ref_b, timeout=60) == ("0", True)  # B ran only after A finished
    assert wait_until(lambda: settled(ray, CPU=2, GPU=1), timeout=30)


def test_max_calls_retires_a_worker_after_that_many_calls(ray):
    @ray.remote(max_calls=2)
    def pid() -> int:
        return os.getpid()

    pids = [ray.get(pid.remote(), timeout=60) for _ in range(6)]
    assert max(pids.count(p) for p in set(pids)) <= 2
    assert len(set(pids)) >= 3


def test_omp_num_threads_follows_num_cpus_as_in_ray(ray):
    @ray.remote
    def omp() -> str | None:
        return os.environ.get("OMP_NUM_THREADS")

    assert ray.get(omp.remote(), timeout=60) == "1"
    assert ray.get(omp.options(num_cpus=2).remote(), timeout=60) == "2"
    env = {"env_vars": {"OMP_NUM_THREADS": "7"}}
    assert ray.get(omp.options(runtime_env=env).remote(), timeout=60) == "7"


ZERO_CPU_NODE = """
import zmesh
zmesh.init(num_cpus=0)

@zmesh.remote(num_cpus=0)
def one():
    return 1

print("RESULT", zmesh.get(one.remote(), timeout=60), flush=True)
zmesh.shutdown()
"""


def test_a_zero_cpu_task_runs_on_a_node_without_cpus():
    out = subprocess.run([sys.executable, "-c", ZERO_CPU_NODE], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "RESULT 1" in out.stdout
