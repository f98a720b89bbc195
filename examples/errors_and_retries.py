"""Failures as Ray reports them: task errors keep the user's exception type, crashed workers
are retried (`max_retries`), and `get(timeout=...)` raises GetTimeoutError.

    python examples/errors_and_retries.py
"""

import os
import tempfile
import time

import zmesh as ray
from zmesh.exceptions import GetTimeoutError, RayTaskError

ray.init(num_cpus=2)


class InsufficientFunds(Exception):
    pass


@ray.remote
def withdraw(balance, amount):
    if amount > balance:
        raise InsufficientFunds(f"cannot withdraw {amount} from {balance}")
    return balance - amount


print("withdraw:", ray.get(withdraw.remote(100, 30)))  # -> 70
try:
    ray.get(withdraw.remote(10, 30))
except InsufficientFunds as err:
    # the error is both the user's class and a RayTaskError carrying the remote traceback
    print("caught InsufficientFunds; also a RayTaskError:", isinstance(err, RayTaskError))


# A worker that dies mid-task (here: os._exit on the first try) is a system failure:
# the task runs again on a fresh worker, up to max_retries times.
marker = os.path.join(tempfile.mkdtemp(prefix="zmesh-example-"), "crashed-once")


@ray.remote(max_retries=3)
def flaky(path):
    if not os.path.exists(path):
        open(path, "w").close()
        os._exit(1)
    return "succeeded after a worker crash"


print("flaky:", ray.get(flaky.remote(marker), timeout=60))
os.remove(marker)
os.rmdir(os.path.dirname(marker))


# A get that waits longer than its timeout raises GetTimeoutError; the task keeps running.
@ray.remote
def slow():
    time.sleep(5)


try:
    ray.get(slow.remote(), timeout=0.2)
except GetTimeoutError:
    print("get(timeout=0.2) raised GetTimeoutError")

ray.shutdown()
