"""Tasks through the public API, as a Ray user writes them."""

from __future__ import annotations

import numpy as np
import pytest

import zmesh


def test_square_tasks_return_in_order(ray):
    @ray.remote
    def square(x):
        return x * x

    assert ray.get([square.remote(i) for i in range(10)]) == [i * i for i in range(10)]


def test_top_level_ref_args_are_resolved_and_nested_refs_stay_refs(ray):
    @ray.remote
    def inc(x):
        return x + 1

    @ray.remote
    def kinds(a, box):
        return type(a).__name__, type(box[0]).__name__, ray.get(box[0])

    ref = inc.remote(1)
    assert ray.get(inc.remote(ref)) == 3
    assert ray.get(kinds.remote(ref, [ref])) == ("int", "ObjectRef", 2)


def test_chain_of_tasks_passing_refs(ray):
    @ray.remote
    def inc(x):
        return x + 1

    ref = inc.remote(0)
    for _ in range(49):
        ref = inc.remote(ref)
    assert ray.get(ref) == 50


def test_num_returns_gives_one_ref_per_value(ray):
    @ray.remote(num_returns=3)
    def three():
        return 1, "two", [3]

    a, b, c = three.remote()
    assert ray.get([a, b, c]) == [1, "two", [3]]


def test_options_override_per_call(ray):
    @ray.remote
    def pair():
        return 1, 2

    x, y = pair.options(num_returns=2).remote()
    assert ray.get(y) == 2


def test_task_error_is_an_instance_of_the_users_exception_with_remote_traceback(ray):
    class CustomError(Exception):
        pass

    @ray.remote
    def fail():
        raise CustomError("it broke")

    with pytest.raises(CustomError) as info:
        ray.get(fail.remote())
    assert isinstance(info.value, zmesh.exceptions.RayTaskError)
    assert "it broke" in str(info.value)
    assert "in fail" in str(info.value)  # the remote traceback names the function


def test_nested_tasks_can_get_inside_a_task(ray):
    @ray.remote
    def leaf(x):
        return x * 10

    @ray.remote
    def parent(n):
        return sum(ray.get([leaf.remote(i) for i in range(n)]))

    assert ray.get(parent.remote(4)) == 60
    assert ray.get([parent.remote(3) for _ in range(3)]) == [30, 30, 30]


def test_large_numpy_argument_and_result_round_trip(ray):
    @ray.remote
    def double(a):
        return a * 2

    arr = np.arange(1_000_000, dtype=np.float64)
    out = ray.get(double.remote(arr))
    assert out.shape == arr.shape and out[-1] == arr[-1] * 2


def test_retry_exceptions_retries_user_errors_up_to_max_retries(ray, tmp_path):
    marker = tmp_path / "attempts"

    @ray.remote(max_retries=2, retry_exceptions=True)
    def flaky(path):
        with open(path, "a") as f:
            f.write("x")
        with open(path) as f:
            attempts = len(f.read())
        if attempts < 3:
            raise RuntimeError("not yet")
        return "done"

    assert ray.get(flaky.remote(str(marker))) == "done"
    assert marker.read_text() == "xxx"


def test_without_retry_exceptions_a_user_error_is_not_retried(ray, tmp_path):
    marker = tmp_path / "attempts"

    @ray.remote(max_retries=3)
    def fails(path):
        with open(path, "a") as f:
            f.write("x")
        raise RuntimeError("once")

    with pytest.raises(RuntimeError):
        ray.get(fails.remote(str(marker)))
    assert marker.read_text() == "x"


def test_worker_death_is_retried_then_reported_as_worker_crashed(ray, tmp_path):
    import os

    marker = tmp_path / "deaths"

    @ray.remote(max_retries=1)
    def die(path):
        with open(path, "a") as f:
            f.write("x")
        os._exit(3)

    with pytest.raises(zmesh.exceptions.WorkerCrashedError) as info:
        ray.get(die.remote(str(marker)))
    assert marker.read_text() == "xx"  # first run plus one retry
    assert "exited with code 3" in str(info.value)


def test_worker_death_then_success_on_retry(ray, tmp_path):
    import os

    marker = tmp_path / "once"

    @ray.remote(max_retries=3)
    def die_once(path):
        if not os.path.exists(path):
            open(path, "w").close()
            os._exit(1)
        return "recovered"

    assert ray.get(die_once.remote(str(marker))) == "recovered"


def test_get_timeout_raises_get_timeout_error(ray):
    @ray.remote
    def slow():
        import time

        time.sleep(2)

    with pytest.raises(zmesh.exceptions.GetTimeoutError):
        ray.get(slow.remote(), timeout=0.1)


def test_calling_a_remote_function_directly_says_how_to_call_it(ray):
    @ray.remote
    def f():
        return 1

    with pytest.raises(TypeError, match=r"f\.remote"):
        f()


def test_bad_option_names_are_refused_with_a_hint(ray):
    with pytest.raises(ValueError, match="did you mean 'num_cpus'"):
        @ray.remote(num_cpu=1)
        def f():
            return 1


def test_env_vars_runtime_env_reaches_the_task(ray):
    @ray.remote(runtime_env={"env_vars": {"ZMESH_TEST_VAR": "hello"}})
    def read():
        import os

        return os.environ.get("ZMESH_TEST_VAR")

    @ray.remote
    def read_plain():
        import os

        return os.environ.get("ZMESH_TEST_VAR")

    assert ray.get(read.remote()) == "hello"
    assert ray.get(read_plain.remote()) is None


def test_unserializable_argument_fails_the_call_not_the_worker(ray):
    import threading

    @ray.remote
    def f(x):
        return 1

    class Holder:
        def __init__(self):
            self.lock = threading.Lock()

    with pytest.raises(zmesh.exceptions.SerializationError, match="lock"):
        f.remote(Holder())
    assert ray.get(f.remote(1)) == 1


def test_cancel_a_running_task_raises_task_cancelled(ray):
    @ray.remote
    def forever():
        import time

        while True:
            time.sleep(0.01)

    ref = forever.remote()
    ray.wait([ref], timeout=0.3)
    ray.cancel(ref)
    with pytest.raises(zmesh.exceptions.TaskCancelledError):
        ray.get(ref, timeout=10)


def test_runtime_context_reports_the_resources_a_task_and_an_actor_hold(ray):
    @ray.remote(num_cpus=0.5)
    def held():
        return ray.get_runtime_context().get_assigned_resources()

    @ray.remote(num_cpus=1)
    class Holder:
        def held(self):
            return ray.get_runtime_context().get_assigned_resources()

    assert ray.get(held.remote()) == {"CPU": 0.5}
    h = Holder.remote()
    assert ray.get(h.held.remote()) == {"CPU": 1.0}
    ray.kill(h)


def test_force_cancel_kills_the_worker_and_is_not_retried(ray):
    @ray.remote(max_retries=3)
    def forever():
        import time

        while True:
            time.sleep(0.01)

    ref = forever.remote()
    ray.wait([ref], timeout=0.3)
    ray.cancel(ref, force=True)
    with pytest.raises(zmesh.exceptions.TaskCancelledError):
        ray.get(ref, timeout=10)


def test_cancelling_a_queued_task_means_it_never_runs(ray, tmp_path):
    marker = tmp_path / "ran"

    @ray.remote(num_cpus=2)
    def hog(seconds):
        import time

        time.sleep(seconds)

    @ray.remote(num_cpus=2)
    def touch(path):
        open(path, "w").close()

    blocker = hog.remote(0.5)
    queued = touch.remote(str(marker))
    ray.cancel(queued)
    with pytest.raises(zmesh.exceptions.TaskCancelledError):
        ray.get(queued, timeout=10)
    ray.get(blocker, timeout=10)
    assert not marker.exists()


def test_leases_held_by_a_worker_that_dies_go_back_to_the_node(ray):
    from runtime_fixtures import wait_until

    @ray.remote
    def child():
        return 1

    @ray.remote(max_retries=0)
    def submit_then_die():
        import os

        ray.get(child.remote())  # this worker now owns a lease on another worker
        os._exit(1)

    with pytest.raises(zmesh.exceptions.WorkerCrashedError):
        ray.get(submit_then_die.remote(), timeout=30)
    assert wait_until(lambda: ray.available_resources().get("CPU") == 2.0, timeout=10), \
        ray.available_resources()


def test_workers_draw_different_numpy_random_numbers(ray):
    # Workers are forked from one fork server: a numpy random state it held would repeat in
    # every worker. Each worker's numpy.random is its own (reseeded, or imported fresh).
    @ray.remote
    class Draw:
        def draw(self):
            import os

            return os.getpid(), float(np.random.rand())

    actors = [Draw.remote() for _ in range(4)]
    draws = ray.get([a.draw.remote() for a in actors], timeout=60)
    assert len({pid for pid, _ in draws}) == 4
    assert len({x for _, x in draws}) == 4, draws


def test_a_worker_keeps_no_signal_disposition_of_its_fork_server(ray):
    """The fork server ignores its stop signal outside its numpy import; the workers it forks
    get the default disposition back (a user's SIGUSR2 handler or kill works as anywhere)."""
    import signal

    from zmesh.runtime.node.zygote import STOP_SIGNAL

    @ray.remote
    def disposition():
        return [signal.getsignal(s) == signal.SIG_DFL for s in (STOP_SIGNAL, signal.SIGCHLD)]

    assert ray.get(disposition.remote()) == [True, True]
