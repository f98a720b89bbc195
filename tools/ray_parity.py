"""Issue 13's semantics checks as small programs on Ray's public API, run side by side.

The same file runs on Ray and on zmesh:

    /work/ray-venv/bin/python tools/ray_parity.py            # Ray 2.60
    python -m zmesh.ray_compat tools/ray_parity.py           # zmesh, as `import ray`

Each check prints one line, `PASS name` or `FAIL name: what happened`; the expectations are
written from Ray's documentation (and, where it is silent, from what Ray 2.60 does).
`--only SUBSTR` runs the checks whose name contains SUBSTR; `--no-cluster` skips the
multi-node checks. Results: benchmarks/results/ray_parity.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

import ray
from ray.exceptions import (
    GetTimeoutError,
    PendingCallsLimitExceeded,
    RayActorError,
    TaskCancelledError,
)
from ray.util.placement_group import (
    get_current_placement_group,
    placement_group,
    placement_group_table,
    remove_placement_group,
)
from ray.util.scheduling_strategies import (
    NodeAffinitySchedulingStrategy,
    PlacementGroupSchedulingStrategy,
)

CHECKS: list[tuple[str, Callable[[], None], bool]] = []


def check(name: str, cluster: bool = False) -> Callable[[Callable[[], None]], Callable[[], None]]:
    def add(fn: Callable[[], None]) -> Callable[[], None]:
        CHECKS.append((name, fn, cluster))
        return fn
    return add


def raises(exc: type[BaseException], fn: Callable[[], Any]) -> BaseException:
    try:
        fn()
    except exc as e:
        return e
    raise AssertionError(f"expected {exc.__name__}")


@ray.remote(num_cpus=0, max_concurrency=8)
class Gate:
    def __init__(self) -> None:
        self.ev = threading.Event()
        self.started = threading.Event()

    def wait(self) -> str:
        self.ev.wait(120)
        return "released"

    def mark(self) -> None:
        self.started.set()

    def wait_started(self) -> bool:
        return self.started.wait(60)

    def open(self) -> None:
        self.ev.set()


@ray.remote(num_cpus=0)
class Seq:
    def __init__(self) -> None:
        self.ran: list[Any] = []

    def block(self, g: Any) -> None:
        ray.get(g.mark.remote())
        ray.get(g.wait.remote())

    def record(self, x: Any) -> Any:
        self.ran.append(x)
        return x

    def ran_list(self) -> list[Any]:
        return self.ran

    def pid(self) -> int:
        return os.getpid()


# -------------------------------------------------------------------------- actor lifetime


@check("actor_last_handle_gone_frees_its_resources")
def _() -> None:
    @ray.remote(num_cpus=4)
    class Big:
        def ping(self) -> int:
            return 1

    b = Big.remote()
    ray.get(b.ping.remote(), timeout=60)
    del b

    @ray.remote(num_cpus=4)
    def f() -> int:
        return 2

    assert ray.get(f.remote(), timeout=60) == 2


@check("exit_actor_ends_the_actor")
def _() -> None:
    @ray.remote(num_cpus=0)
    class A:
        def bye(self) -> None:
            ray.actor.exit_actor()

        def ping(self) -> int:
            return 1

    a = A.remote()
    ray.get(a.ping.remote(), timeout=60)
    bye = a.bye.remote()
    raises(RayActorError, lambda: ray.get(bye, timeout=60))
    raises(RayActorError, lambda: ray.get(a.ping.remote(), timeout=60))


@check("ray_terminate_ends_the_actor_after_queued_calls")
def _() -> None:
    a = Seq.remote()
    first = a.record.remote(1)
    a.__ray_terminate__.remote()
    assert ray.get(first, timeout=60) == 1
    raises(RayActorError, lambda: ray.get(a.record.remote(2), timeout=60))


@check("kill_no_restart_false_restarts_the_actor")
def _() -> None:
    a = Seq.options(max_restarts=1).remote()
    pid = ray.get(a.pid.remote(), timeout=60)
    ray.kill(a, no_restart=False)
    deadline = time.monotonic() + 60
    new = pid
    while new == pid and time.monotonic() < deadline:
        try:
            new = ray.get(a.pid.remote(), timeout=60)
        except RayActorError:
            pass
    assert new != pid, "never restarted"


@check("killed_actor_name_is_free_at_once")
def _() -> None:
    a = Seq.options(name="parity-name").remote()
    ray.get(a.pid.remote(), timeout=60)
    ray.kill(a)
    b = Seq.options(name="parity-name").remote()
    assert ray.get(b.record.remote(3), timeout=60) == 3
    ray.kill(b)


@check("actor_constructor_ref_argument_is_resolved")
def _() -> None:
    @ray.remote(num_cpus=0)
    class A:
        def __init__(self, x: int) -> None:
            self.x = x

        def get(self) -> int:
            return self.x

    assert ray.get(A.remote(ray.put(5)).get.remote(), timeout=60) == 5


@check("was_current_actor_reconstructed_after_restart")
def _() -> None:
    @ray.remote(num_cpus=0, max_restarts=1)
    class A:
        def flag(self) -> bool:
            return ray.get_runtime_context().was_current_actor_reconstructed

        def pid(self) -> int:
            return os.getpid()

    a = A.remote()
    assert ray.get(a.flag.remote(), timeout=60) is False
    ray.kill(a, no_restart=False)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            # a call made right after the (asynchronous) kill may still reach the old
            # incarnation in Ray and answer False: wait for the restarted one
            if ray.get(a.flag.remote(), timeout=60) is True:
                return
        except RayActorError:
            continue
    raise AssertionError("never answered True after the restart")


# --------------------------------------------------------------------------- cancellation


@check("cancel_interrupts_a_task_blocked_in_get")
def _() -> None:
    g = Gate.remote()

    @ray.remote(num_cpus=1)
    def blocked(g: Any) -> Any:
        ray.get(g.mark.remote())
        return ray.get(g.wait.remote())

    ref = blocked.remote(g)
    assert ray.get(g.wait_started.remote(), timeout=60)
    ray.cancel(ref)
    raises(TaskCancelledError, lambda: ray.get(ref, timeout=60))
    ray.get(g.open.remote())


@check("queued_actor_task_cancelled_never_runs")
def _() -> None:
    g = Gate.remote()
    a = Seq.remote()
    first = a.block.remote(g)
    assert ray.get(g.wait_started.remote(), timeout=60)
    doomed = a.record.remote("doomed")
    kept = a.record.remote("kept")
    raises(ValueError, lambda: ray.cancel(doomed, force=True))
    ray.cancel(doomed)
    ray.get(g.open.remote(), timeout=60)
    ray.get(first, timeout=60)
    raises(TaskCancelledError, lambda: ray.get(doomed, timeout=60))
    assert ray.get(kept, timeout=60) == "kept"
    ran = ray.get(a.ran_list.remote(), timeout=60)
    assert ran == ["kept"], f"ran {ran}"


@check("running_async_actor_task_is_cancelled")
def _() -> None:
    @ray.remote(num_cpus=0)
    class Async:
        async def sleep(self) -> str:
            await asyncio.sleep(60)
            return "slept"

        async def ping(self) -> int:
            return 1

    a = Async.remote()
    ray.get(a.ping.remote(), timeout=60)
    ref = a.sleep.remote()
    ray.wait([ref], timeout=1)
    ray.cancel(ref)
    raises(TaskCancelledError, lambda: ray.get(ref, timeout=60))


@check("recursive_cancel_cancels_child_actor_tasks")
def _() -> None:
    @ray.remote(num_cpus=0, max_concurrency=2)
    class Keeper:
        def __init__(self) -> None:
            self.refs: list[Any] = []
            self.kept = threading.Event()

        def keep(self, refs: list[Any]) -> None:
            self.refs = refs
            self.kept.set()

        def get(self) -> list[Any]:
            self.kept.wait(60)
            return self.refs

    @ray.remote(num_cpus=0)
    def parent(a: Any, keeper: Any) -> Any:
        child = a.record.remote("child")
        ray.get(keeper.keep.remote([child]))
        return ray.get(child)

    g, a, keeper = Gate.remote(), Seq.remote(), Keeper.remote()
    first = a.block.remote(g)
    assert ray.get(g.wait_started.remote(), timeout=60)
    ref = parent.remote(a, keeper)
    children = ray.get(keeper.get.remote(), timeout=90)
    ray.cancel(ref)
    raises(TaskCancelledError, lambda: ray.get(ref, timeout=60))
    ray.get(g.open.remote(), timeout=60)
    ray.get(first, timeout=60)
    try:
        got: Any = ray.get(children[0], timeout=60)
    except TaskCancelledError:
        got = "TaskCancelledError"
    ran = ray.get(a.ran_list.remote(), timeout=60)
    assert got == "TaskCancelledError" and ran == [], f"child gave {got!r}, ran {ran}"


# ------------------------------------------------------------------ blocking and resources


@check("get_of_a_list_raises_as_soon_as_one_failed")
def _() -> None:
    g = Gate.remote()

    @ray.remote(num_cpus=0)
    def fail() -> None:
        raise ValueError("early")

    slow = g.wait.remote()
    raises(ValueError, lambda: ray.get([slow, fail.remote()], timeout=60))
    ray.get(g.open.remote())


@check("wait_inside_a_task_lends_its_cpu")
def _() -> None:
    @ray.remote(num_cpus=4)
    def child() -> int:
        return 1

    @ray.remote(num_cpus=4)
    def parent() -> int:
        ready, _ = ray.wait([child.remote()], timeout=60)
        return len(ready)

    assert ray.get(parent.remote(), timeout=90) == 1


@check("num_cpus_0_task_runs")
def _() -> None:
    @ray.remote(num_cpus=0)
    def f() -> int:
        return 7

    assert ray.get(f.remote(), timeout=60) == 7


@check("available_resources_converge_to_totals")
def _() -> None:
    @ray.remote(num_cpus=1)
    def f() -> int:
        return 1

    ray.get([f.remote() for _ in range(8)], timeout=60)
    total = ray.cluster_resources()["CPU"]
    deadline = time.monotonic() + 30
    while ray.available_resources().get("CPU") != total and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ray.available_resources().get("CPU") == total, ray.available_resources()


@check("omp_num_threads_follows_num_cpus")
def _() -> None:
    @ray.remote(num_cpus=2)
    def f() -> str | None:
        return os.environ.get("OMP_NUM_THREADS")

    assert ray.get(f.remote(), timeout=60) == "2"


@check("max_calls_retires_the_worker")
def _() -> None:
    @ray.remote(num_cpus=1, max_calls=1)
    def pid() -> int:
        return os.getpid()

    first = ray.get(pid.remote(), timeout=60)
    assert ray.get(pid.remote(), timeout=60) != first


@check("max_pending_calls_raises_past_the_limit")
def _() -> None:
    g = Gate.options(max_pending_calls=2).remote()
    refs = [g.wait.remote() for _ in range(2)]
    raises(PendingCallsLimitExceeded, lambda: g.wait.remote())

    @ray.remote(num_cpus=0)
    class Opener:
        def open(self, h: Any) -> None:
            ray.get(h.open.remote())

    ray.get(Opener.remote().open.remote(g), timeout=60)
    assert ray.get(refs, timeout=60) == ["released"] * 2


@check("max_pending_calls_through_a_passed_handle")
def _() -> None:
    g = Gate.options(max_pending_calls=2).remote()

    @ray.remote(num_cpus=0)
    def overfill(h: Any) -> str:
        refs = [h.wait.remote() for _ in range(2)]
        try:
            h.wait.remote()
        except PendingCallsLimitExceeded:
            return f"limited after {len(refs)}"
        return "unlimited"

    assert ray.get(overfill.remote(g), timeout=60) == "limited after 2"
    ray.kill(g)


@check("threaded_actor_ready_call_overtakes_unready_one")
def _() -> None:
    @ray.remote(num_cpus=0, max_concurrency=4)
    class Echo:
        def echo(self, x: Any) -> Any:
            return x

    g = Gate.remote()
    e = Echo.remote()
    blocked = e.echo.remote(g.wait.remote())
    assert ray.get(e.echo.remote("ready"), timeout=60) == "ready"
    assert ray.wait([blocked], timeout=0)[0] == []
    ray.get(g.open.remote())
    assert ray.get(blocked, timeout=60) == "released"


# ------------------------------------------------------------------------ objects, limits


@check("ref_nested_in_a_return_value_stays_alive")
def _() -> None:
    @ray.remote(num_cpus=0)
    def make() -> list[Any]:
        return [ray.put("inner")]

    outer = ray.get(make.remote(), timeout=60)
    assert ray.get(outer[0], timeout=60) == "inner"


@check("ten_mb_of_small_objects_as_an_argument")
def _() -> None:
    @ray.remote(num_cpus=0)
    def count(xs: list[str]) -> int:
        return len(xs)

    xs = ["x" * 100] * 100_000
    assert ray.get(count.remote(xs), timeout=120) == 100_000


@check("huge_argument_list")
def _() -> None:
    @ray.remote(num_cpus=0)
    def count(*xs: int) -> int:
        return len(xs)

    assert ray.get(count.remote(*range(10_000)), timeout=120) == 10_000


# ------------------------------------------------------------------------ placement groups


@check("pg_bad_bundles_raise_value_error")
def _() -> None:
    for bad in ([], [{}], [{"CPU": 0}]):
        raises(ValueError, lambda b=bad: placement_group(b))


@check("pg_bad_strategy_raises_value_error")
def _() -> None:
    raises(ValueError, lambda: placement_group([{"CPU": 1}], strategy="PACKED"))


@check("pg_bundle_index_out_of_range_raises_value_error")
def _() -> None:
    pg = placement_group([{"CPU": 1}])
    assert pg.wait(60)

    @ray.remote(num_cpus=1)
    def f() -> int:
        return 1

    raises(ValueError, lambda: f.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
        pg, placement_group_bundle_index=3)).remote())
    remove_placement_group(pg)


@check("pg_table_states_created_then_removed_with_stats")
def _() -> None:
    pg = placement_group([{"CPU": 1}])
    assert pg.wait(60)
    row = placement_group_table(pg)
    assert row["state"] == "CREATED", row
    assert "scheduling_state" in row["stats"], row
    remove_placement_group(pg)
    deadline = time.monotonic() + 30
    while placement_group_table(pg)["state"] != "REMOVED" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert placement_group_table(pg)["state"] == "REMOVED"


@check("pg_eq_and_hash_follow_the_id")
def _() -> None:
    pg = placement_group([{"CPU": 1}])

    @ray.remote(num_cpus=0)
    def echo(p: Any) -> Any:
        return p

    back = ray.get(echo.remote(pg), timeout=60)
    assert back == pg and hash(back) == hash(pg)
    remove_placement_group(pg)


@check("pg_capture_child_tasks")
def _() -> None:
    pg = placement_group([{"CPU": 1}])
    assert pg.wait(60)

    @ray.remote(num_cpus=0)
    def child() -> Any:
        return get_current_placement_group()

    @ray.remote(num_cpus=1)
    def parent() -> Any:
        return ray.get(child.remote())

    got = ray.get(parent.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
        pg, placement_group_capture_child_tasks=True)).remote(), timeout=60)
    assert got == pg, got
    remove_placement_group(pg)


# --------------------------------------------------------------------------- API details


@check("runtime_context_get_and_current_actor")
def _() -> None:
    ctx = ray.get_runtime_context().get()
    assert "job_id" in ctx and "node_id" in ctx, ctx

    @ray.remote(num_cpus=0)
    class A:
        def me(self) -> Any:
            return ray.get_runtime_context().current_actor

    a = A.remote()
    assert ray.get(a.me.remote(), timeout=60) == a


@check("ids_have_hex")
def _() -> None:
    ref = ray.put(1)
    assert isinstance(ref.hex(), str)
    assert isinstance(ray.get_runtime_context().get_job_id(), str)


@check("actor_class_exposes_class_attributes")
def _() -> None:
    @ray.remote
    class A:
        LIMIT = 3

    assert A.LIMIT == 3


@check("kill_of_a_non_handle_raises_value_error")
def _() -> None:
    raises(ValueError, lambda: ray.kill("not an actor"))


@check("wait_of_empty_list")
def _() -> None:
    assert ray.wait([]) == ([], [])


@check("remote_with_empty_parentheses_on_a_class_is_rejected")
def _() -> None:
    # observed Ray 2.60: an `assert` in ray.remote rejects `@ray.remote()` (AssertionError)
    def make() -> None:
        @ray.remote()
        class A:
            pass

    raises(AssertionError, make)


@check("async_def_remote_function_is_rejected")
def _() -> None:
    # observed Ray 2.60: "'async def' should not be used for remote tasks" (ValueError)
    async def f() -> int:
        return 5

    raises(ValueError, lambda: ray.remote(num_cpus=0)(f))


@check("non_string_actor_name_rejected")
def _() -> None:
    raises(TypeError, lambda: Seq.options(name=5).remote())


@check("error_repr_uses_ray_class_names")
def _() -> None:
    @ray.remote(num_cpus=0)
    def fail() -> None:
        raise ValueError("boom")

    e = raises(ValueError, lambda: ray.get(fail.remote(), timeout=60))
    assert "RayTaskError(ValueError)" in repr(type(e)) or type(e).__name__ == \
        "RayTaskError(ValueError)", type(e)
    assert isinstance(e, ray.exceptions.RayTaskError)


@check("get_timeout_raises_get_timeout_error")
def _() -> None:
    g = Gate.remote()
    raises(GetTimeoutError, lambda: ray.get(g.wait.remote(), timeout=0.5))
    ray.get(g.open.remote())


# ------------------------------------------------------------------- several nodes


@check("pg_rescheduled_when_its_node_dies", cluster=True)
def _() -> None:
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    nodes = [cluster.add_node(num_cpus=1), cluster.add_node(num_cpus=1)]
    cluster.wait_for_nodes()
    ray.init(address=cluster.address)
    try:
        pg = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="STRICT_SPREAD")
        assert pg.wait(120)
        layout = placement_group_table(pg)["bundles_to_node_id"]
        ids = {n.node_id: n for n in nodes}
        doomed_id = next(i for i in layout.values() if i in ids)

        @ray.remote(num_cpus=1, max_restarts=1)
        class Where:
            def node(self) -> str:
                return ray.get_runtime_context().get_node_id()

        idx = next(i for i, n in layout.items() if n == doomed_id)
        a = Where.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
            pg, placement_group_bundle_index=idx)).remote()
        assert ray.get(a.node.remote(), timeout=120) == doomed_id
        cluster.remove_node(ids[doomed_id], allow_graceful=False)
        seen = []
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            row = placement_group_table(pg)
            seen.append(row["state"])
            if row["state"] == "CREATED" and row["bundles_to_node_id"].get(idx) != doomed_id:
                break
            time.sleep(0.2)
        row = placement_group_table(pg)
        assert row["state"] == "CREATED", seen
        moved = row["bundles_to_node_id"][idx]
        assert moved != doomed_id and moved in ids, row
        deadline = time.monotonic() + 180
        where = ""
        while time.monotonic() < deadline and where != moved:
            try:
                where = ray.get(a.node.remote(), timeout=60)
            except RayActorError:
                pass
        assert where == moved, (where, moved)
        print(f"#   states seen: {sorted(set(seen))}", flush=True)
    finally:
        ray.shutdown()
        cluster.shutdown()


@check("pg_table_lists_groups_made_through_any_node", cluster=True)
def _() -> None:
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    far = cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address)
    try:
        pg = placement_group([{"CPU": 1}], name="everywhere")
        assert pg.wait(120)

        @ray.remote(num_cpus=0)
        def table_there() -> list[str]:
            return [r["name"] for r in placement_group_table().values()]

        names = ray.get(table_there.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
            far.node_id, soft=False)).remote(), timeout=120)
        assert "everywhere" in names, names
    finally:
        ray.shutdown()
        cluster.shutdown()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="")
    parser.add_argument("--no-cluster", action="store_true")
    args = parser.parse_args()
    backend = "zmesh" if "zmesh" in getattr(ray, "__file__", "") or hasattr(ray, "mesh") \
        else f"ray {ray.__version__}"
    print(f"# backend: {backend}", flush=True)
    chosen = [c for c in CHECKS if args.only in c[0]]
    single = [c for c in chosen if not c[2]]
    failed = 0
    if single:
        ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
        for name, fn, _ in single:
            failed += _run(name, fn)
        ray.shutdown()
    if not args.no_cluster:
        for name, fn, _ in (c for c in chosen if c[2]):
            failed += _run(name, fn)
    print(f"# {len(chosen) - failed}/{len(chosen)} passed", flush=True)
    return 1 if failed else 0


def _run(name: str, fn: Callable[[], None]) -> int:
    start = time.monotonic()
    try:
        fn()
    except BaseException as exc:  # noqa: BLE001 - a check's failure is reported, not raised
        where = traceback.extract_tb(exc.__traceback__)[-1]
        print(f"FAIL {name}: {type(exc).__name__}: {str(exc)[:200]!r} (line {where.lineno}, "
              f"{time.monotonic() - start:.1f}s)", flush=True)
        return 1
    print(f"PASS {name} ({time.monotonic() - start:.1f}s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
