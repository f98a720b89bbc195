"""A driver whose node dies is told so, naming the node: `get` raised nothing and hung
forever (or said only "timed out") when the node was SIGKILLed."""

from __future__ import annotations

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

import zmesh
from zmesh import api
from zmesh.errors import NodeDiedError


def test_get_of_a_pending_task_raises_node_died_when_the_driver_node_is_killed(no_zmesh_leaks):
    info = zmesh.init(num_cpus=1)

    @zmesh.remote
    def slow():
        time.sleep(600)

    ref = slow.remote()
    ready, _ = zmesh.wait([ref], timeout=0.5)
    assert not ready
    os.kill(api._state["proc"].pid, signal.SIGKILL)
    with ThreadPoolExecutor(1) as pool:  # get() without a timeout hung here forever
        untimed = pool.submit(zmesh.get, ref)
        with pytest.raises(NodeDiedError, match=info["node_id"]):
            untimed.result(timeout=60)
    with pytest.raises(NodeDiedError, match=info["node_id"]):
        zmesh.get(slow.remote(), timeout=60)
