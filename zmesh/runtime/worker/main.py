"""A worker process: a core client (for nested calls) plus an executor for user code.

Forked from the fork server with the runtime already imported, so starting one costs
milliseconds. It exits when its node goes away.
"""

from __future__ import annotations

import os
import sys

import msgspec

from zmesh.protocol.messages import runtime as m
from zmesh.protocol.messages.ops import TaskEvents, UserMetrics
from zmesh.ray_compat import install_if_requested
from zmesh.runtime import context
from zmesh.runtime.owner.client import CoreClient
from zmesh.runtime.worker import events, logs
from zmesh.runtime.worker.executor import Executor

PARENT_CHECK_S = 1.0
EVENTS_PERIOD_S = 1.0


def main(node_address: str, session_dir: str, worker_id: bytes, capture: bool = True) -> None:
    """Serve tasks and actor calls until the node tells us to stop or disappears."""
    install_if_requested()  # Ray-compat mode inherited from the node's environment
    client = CoreClient(node_address, session_dir, "worker", worker_id=worker_id)
    context.set_client(client)
    executor = Executor(client)
    attach(client, executor)
    if capture:
        logs.capture_output(lambda prefix, lines, err: client.loop.send_threadsafe(
            node_address, m.LogLines(prefix=prefix, lines=lines, stderr=err)))
    client.loop.thread = None
    # The node's own answer can arrive after an owner's first task (another connection):
    # the fork server's environment already says which node and store this worker has.
    if os.environ.get("ZMESH_NODE_ID") and os.environ.get("ZMESH_STORE_DIR"):
        _registered(client, m.ClientRegistered(
            node_id=os.environ["ZMESH_NODE_ID"], node_address=node_address,
            store_dir=os.environ["ZMESH_STORE_DIR"], job_id=os.environ.get("ZMESH_JOB_ID", "")))
    parent = os.getppid()

    def check_parent() -> None:  # backstop for the parent-death signal: never outlive the node
        if os.getppid() != parent:
            client.loop.stop()
        else:
            client.loop.call_later(PARENT_CHECK_S, check_parent)

    client.loop.call_later(PARENT_CHECK_S, check_parent)

    said_running = [False]

    def ship_events() -> None:  # finished and running task spans: `zmesh timeline`, state API
        done = events.recorder.drain()
        running = events.recorder.running()
        if done or running or said_running[0]:  # (an idle worker sends nothing)
            client.loop.send(client.node_address, TaskEvents(pid=os.getpid(), events=done,
                                                             running=running))
            said_running[0] = bool(running)
        user = sys.modules.get("zmesh.util.metrics")  # only if user code defined metrics
        if user is not None and user.defined():
            client.loop.send(client.node_address, UserMetrics(
                pid=os.getpid(), records=msgspec.msgpack.encode(user.snapshot())))
        client.loop.call_later(EVENTS_PERIOD_S, ship_events)

    client.loop.call_later(EVENTS_PERIOD_S, ship_events)
    client.loop.run()  # the loop runs on the main thread; exits on Shutdown
    executor.close()
    sys.stdout.flush()
    os._exit(0)


def attach(client: CoreClient, executor: Executor) -> None:
    """Wire a worker's client and executor to its node, start executing and register; the
    same for a forked worker and a simulated one (`zmesh.testing.sim_mesh`)."""
    node_address = client.node_address

    def blocked(flag: bool) -> None:
        client.loop.send_threadsafe(node_address, m.Blocked(worker=client.address, blocked=flag))

    client.blocked_hook = blocked
    client.loop.on(m.Shutdown, lambda s, msg, b: client.loop.stop())
    executor.start()
    client.loop.send(node_address, m.RegisterClient(
        address=client.address, kind="worker", pid=os.getpid(), worker_id=client.worker_id))
    client.loop.on(m.ClientRegistered, lambda s, msg, b: _registered(client, msg))


def _registered(client: CoreClient, msg: m.ClientRegistered) -> None:
    from zmesh.store.mapping import StoreMapper

    client.node_id = msg.node_id
    client.job_id = msg.job_id
    if client.mapper is None:
        client.mapper = StoreMapper(msg.store_dir)
