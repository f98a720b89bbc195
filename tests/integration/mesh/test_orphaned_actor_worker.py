"""Bug 6 (issue 8): a node killed with -9 must not leave its actor's worker running.

The orphan kept answering calls while the actor was restarted on another node, so one
handle reached two incarnations. The worker process must exit with its node, and after the
restart only the new incarnation may answer.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import time
from collections.abc import Iterator

import pytest

import zmesh
from zmesh.runtime.node import zygote
from zmesh.testing import Cluster

EXIT_DEADLINE_S = 30.0


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    zmesh.init(address=c.address)
    try:
        yield c
    finally:
        zmesh.shutdown()
        c.shutdown()


def wait_exit(pid: int, timeout: float) -> bool:
    """True once process `pid` (not our child) has exited, waiting on its pidfd; no polling."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        ready, _, _ = select.select([fd], [], [], timeout)
        return bool(ready)
    finally:
        os.close(fd)


@zmesh.remote(resources={"slot": 1}, max_restarts=1, max_task_retries=0)
class Incarnation:
    def __init__(self) -> None:
        self.calls = 0

    def who(self) -> tuple[int, str, int]:
        self.calls += 1
        return os.getpid(), zmesh.get_runtime_context().get_node_id(), self.calls


def test_a_killed_nodes_actor_worker_exits_and_only_the_restarted_actor_answers(
        cluster: Cluster) -> None:
    for _ in range(2):
        cluster.add_node(num_cpus=1, resources={"slot": 1})
    actor = Incarnation.remote()
    old_pid, old_node, _ = zmesh.get(actor.who.remote(), timeout=60)
    victim = next(n for n in cluster.list_all_nodes() if n.node_id == old_node)
    os.kill(old_pid, 0)  # the worker runs now (raises if it does not)

    cluster.kill_node(victim)  # SIGKILL: no goodbye to its workers

    assert wait_exit(old_pid, EXIT_DEADLINE_S), (
        f"actor worker pid {old_pid} outlived its node {old_node[:8]}, killed with -9")
    deadline = time.monotonic() + 60
    while True:  # calls in flight at the crash may fail until the restart is known
        try:
            new_pid, new_node, calls = zmesh.get(actor.who.remote(), timeout=30)
            break
        except zmesh.exceptions.RayActorError:
            if time.monotonic() > deadline:
                raise
    assert new_node != old_node and new_pid != old_pid
    answers = zmesh.get([actor.who.remote() for _ in range(20)], timeout=60)
    assert {(pid, node) for pid, node, _ in answers} == {(new_pid, new_node)}
    # One incarnation's state: the counter runs on without a gap from another process.
    assert [n for _, _, n in answers] == list(range(calls + 1, calls + 21))


def test_a_fork_server_whose_node_died_before_it_armed_the_death_signal_exits(
        tmp_path: os.PathLike[str]) -> None:
    """The guard for the race behind bug 6: a fork server whose node was gone before it armed
    PR_SET_PDEATHSIG (so no signal would ever reach it) exits at once instead of serving.
    Its node here is pid 1, which is not its parent: the state after such a race."""
    ours, theirs = socket.socketpair()
    pid = os.fork()
    if pid == 0:  # the fork server
        try:
            ours.close()
            zygote.main(theirs.fileno(), f"ipc://{tmp_path}/node.sock", str(tmp_path), 1)
        finally:
            os._exit(0)
    theirs.close()
    try:
        assert wait_exit(pid, EXIT_DEADLINE_S), "the fork server kept serving a dead node"
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 1
    finally:
        ours.close()
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
