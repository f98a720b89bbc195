"""The Ray Core API: init, shutdown, remote, get, put, wait, kill, cancel, get_actor, ..."""

from __future__ import annotations

import atexit
import inspect
import os
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from zmesh.actor import ActorClass, ActorHandle, named_actor_handle
from zmesh.errors import ZmeshError
from zmesh.object_ref import ObjectRef
from zmesh.options import validate_namespace
from zmesh.protocol.messages import runtime as m
from zmesh.remote_function import RemoteFunction
from zmesh.runtime import context

if TYPE_CHECKING:
    from zmesh.runtime.owner.client import CoreClient

_lock = threading.Lock()
_auto_lock = threading.Lock()  # taken before `_lock`, never while holding it
_state: dict[str, Any] = {}
_started: list[tuple[str, str]] = []  # (session dir, node id) of every init in this process


def init(address: str | None = None, *, num_cpus: float | None = None,
         num_gpus: float | None = None, resources: dict[str, float] | None = None,
         object_store_memory: int | None = None, namespace: str | None = None,
         runtime_env: dict[str, Any] | None = None, ignore_reinit_error: bool = False,
         log_to_driver: bool = True, token: str | None = None, ray_compat: bool = False,
         **_ignored: Any) -> dict[str, Any]:
    """Start a private node (no address) or connect to a running one at `address`.

    Connecting needs the mesh's join token: `token`, else $ZMESH_TOKEN / $ZMESH_TOKEN_FILE,
    else that of a node started on this machine at `address`. A wrong or missing token raises
    `AuthenticationError` at once.

    ray_compat=True turns on Ray-compat mode (see zmesh.ray_compat): `import ray` resolves
    to zmesh here and in every worker of this program.
    """
    from zmesh import ray_compat as compat

    if ray_compat:
        compat.install()
    with _lock:
        if context.maybe_client() is not None:
            if ignore_reinit_error:
                return dict(_state.get("info", {}))
            raise RuntimeError("zmesh.init() was already called; call shutdown() first or "
                               "pass ignore_reinit_error=True")
        from zmesh.options import check_options

        if namespace is not None:
            validate_namespace(namespace)
        if runtime_env:
            check_options({"runtime_env": runtime_env}, {"runtime_env"}, "init")
        address = address or os.environ.get("ZMESH_ADDRESS") or (
            os.environ.get("RAY_ADDRESS") if compat.is_installed() else None) or None
        proc = session_dir = None
        made: list[CoreClient] = []  # the client, made while the node starts
        if address in (None, "local"):
            from zmesh.runtime.launcher import new_session_dir, node_ipc_address, start_node

            session_dir = new_session_dir()
            try:
                proc, node_address, session_dir = start_node(
                    num_cpus=float(os.cpu_count() or 1) if num_cpus is None else float(num_cpus),
                    num_gpus=float(num_gpus or 0), resources=dict(resources or {}),
                    object_store_memory=int(object_store_memory or 0), session_dir=session_dir,
                    while_starting=lambda: made.append(_make_client(
                        node_ipc_address(session_dir or ""), session_dir or "", log_to_driver)))
            except BaseException:
                for early in made:
                    early.close()
                raise
        else:
            node_address, session_dir = _resolve_address(address)
            _authenticate(address, node_address, token)
        client = None
        try:
            if made and made[0].node_address == node_address:
                client = made.pop()
            for early in made:  # the node took another address than foreseen (never so far)
                early.close()
            if client is None:
                client = _make_client(node_address, session_dir, log_to_driver)
            client.namespace = namespace or "default"
            client.default_env = dict((runtime_env or {}).get("env_vars") or {})
            if compat.is_installed():  # workers of a node started elsewhere learn it per task
                client.default_env.setdefault(compat.ENV_VAR, "1")
            info = client.connect()
        except BaseException:  # the node we started goes too, not when this process exits
            if client is not None:
                client.close()
            if proc is not None:
                from zmesh.runtime.launcher import stop_node

                stop_node(proc, session_dir or "")
            raise
        context.set_client(client)
        if runtime_env and (runtime_env.get("working_dir") or runtime_env.get("py_modules")):
            from zmesh import runtime_env as renv

            # the job's code: put once, shipped to every task and actor of this driver
            client.default_env.update(renv.env_vars(client, runtime_env))
        _started.append((session_dir or "", info.node_id))
        _state.update(proc=proc, session_dir=session_dir, owns_session=proc is not None,
                      info={"node_id": info.node_id, "address": node_address,
                            "session_dir": session_dir})
        if not _state.get("atexit"):
            atexit.register(shutdown)
            _state["atexit"] = True
        return dict(_state["info"])


def _make_client(node_address: str, session_dir: str, log_to_driver: bool) -> CoreClient:
    """The driver's client, not yet connected. `import zmesh` leaves the runtime's client
    out (a program that never calls init() does not pay for it): init() imports and makes it
    while its node process starts."""
    from zmesh.runtime.owner.client import CoreClient

    return CoreClient(node_address, session_dir, "driver", log_to_driver=log_to_driver)


def _auto_init() -> None:
    """The API was used before init(): start (or, with ZMESH_ADDRESS, join) a runtime, as
    Ray's auto-init does, and say so with Ray's log line."""
    import sys

    if os.environ.get("ZMESH_LAZY_IMPORT") or os.environ.get("ZMESH_NODE_ID"):
        return  # a node or worker process: its runtime is its own, never a new one
    from zmesh import ray_compat

    address = os.environ.get("ZMESH_ADDRESS") or (
        os.environ.get("RAY_ADDRESS") if ray_compat.is_installed() else None)
    with _auto_lock:  # threads that find no runtime at once: one starts it and says so
        if context.maybe_client() is not None:
            return
        info = init(ignore_reinit_error=True)
    if address:
        line = f"Connecting to existing zmesh mesh at address: {info.get('address')}..."
    else:
        line = "Started a local zmesh instance."
    print(f"INFO zmesh -- {line} (zmesh.init() was called automatically)", file=sys.stderr,
          flush=True)


context.set_auto_init(_auto_init)


def _authenticate(address: str, node_address: str, token: str | None) -> None:
    """Find the mesh's credentials, install them, and say Hello to the node with them."""
    from zmesh.runtime.node.credentials import local_credentials
    from zmesh.security import keys
    from zmesh.security.probe import handshake

    if os.environ.get(keys.INSECURE_ENV) == "1" and not token:
        handshake(node_address, None, role="driver")  # a mesh run with --insecure
        return
    creds: keys.ClusterCredentials | None
    if token:
        creds = keys.ClusterCredentials.from_token(token)
    else:
        creds = keys.from_environment() or local_credentials([address, node_address])
        if creds is None:
            from zmesh.errors import AuthenticationError

            raise AuthenticationError(
                f"no join token for the zmesh mesh at {address}: pass init(address=..., "
                "token=...) with the token its first node printed, or set ZMESH_TOKEN")
    keys.install(creds)
    handshake(node_address, creds, role="driver")


def _resolve_address(address: str) -> tuple[str, str]:
    """(node address, session dir) for `init(address=...)`: ipc://path, host:port or "auto"."""
    if address.startswith("ipc://"):
        return address, os.path.dirname(address[len("ipc://"):])
    if address == "auto":
        from zmesh.runtime.launcher import running_nodes

        nodes = running_nodes()
        if not nodes:
            raise ZmeshError("init(address='auto') found no running zmesh node on this machine; "
                             "start one with `zmesh node`")
        return str(nodes[0]["ipc"]), str(nodes[0]["session_dir"])
    hostport = address[len("tcp://"):] if address.startswith("tcp://") else address
    host, sep, port = hostport.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ZmeshError(f"cannot connect to {address!r}: give a node's host:port (as `zmesh "
                         "node` prints it), tcp://host:port, an ipc:// address, or 'auto'")
    if not address.startswith("tcp://"):
        # A node on this machine: talk to it over its ipc socket (faster, and it can watch
        # our pid). An explicit tcp:// address always goes over tcp.
        from zmesh.runtime.launcher import running_nodes

        for info in running_nodes():
            if info.get("address") == f"tcp://{host}:{port}":
                return str(info["ipc"]), str(info["session_dir"])
    _probe_tcp(host, int(port))
    return f"tcp://{host}:{port}", ""


def _probe_tcp(host: str, port: int, timeout: float = 3.0) -> None:
    """Fail at once, with the reason, when nothing listens at host:port; ZeroMQ itself would
    retry silently until the registration timed out."""
    import socket

    try:
        socket.create_connection((host.strip("[]"), port), timeout=timeout).close()
    except ConnectionRefusedError:
        raise ConnectionError(
            f"no zmesh node at {host}:{port}: connection refused. Check the address (`zmesh "
            "node` prints it; `zmesh status` lists the members) or start one there with "
            "`zmesh node`") from None
    except OSError as exc:
        raise ConnectionError(
            f"cannot reach a zmesh node at {host}:{port}: {exc.strerror or exc}. Check the host "
            "and port, and that no firewall blocks it") from None


def shutdown() -> None:
    """Disconnect, and stop the private node (and every worker) if init() started one."""
    with _lock:
        client = context.maybe_client()
        if client is None:
            return
        context.set_client(None)
        client.close()
        proc = _state.pop("proc", None)
        session_dir = _state.pop("session_dir", None)
        if proc is not None:
            from zmesh.runtime.launcher import stop_node

            stop_node(proc, session_dir or "")
        _state.pop("info", None)


def is_initialized() -> bool:
    """True between init() and shutdown()."""
    return context.maybe_client() is not None


def remote(*args: Any, **options: Any) -> Any:
    """Make a function a task or a class an actor; works bare or with options."""
    if len(args) == 1 and not options and (inspect.isfunction(args[0]) or
                                           inspect.isclass(args[0]) or callable(args[0])):
        return _make_remote(args[0], {})
    # Ray refuses `@remote()` (empty parentheses) with an AssertionError and this message
    assert not args and options, (
        "The @remote decorator must be applied either with no arguments and no parentheses, "
        "for example '@remote', or it must be applied using some of its options, for "
        "example '@remote(num_returns=2, resources={\"CustomResource\": 1})'.")

    def deco(obj: Any) -> Any:
        return _make_remote(obj, options)

    return deco


def _make_remote(obj: Any, options: dict[str, Any]) -> Any:
    if inspect.isclass(obj):
        return ActorClass(obj, options)
    if callable(obj):
        return RemoteFunction(obj, options)
    raise TypeError(f"@remote needs a function or a class, got {type(obj).__name__}")


def get(refs: Any, *, timeout: float | None = None) -> Any:
    """The value(s) of a ref or list of refs; raises the task's error or GetTimeoutError."""
    client = context.current_client()
    if client.current_actor_id and not _warned_async_get:
        _warn_if_blocking_the_event_loop()
    if isinstance(refs, ObjectRef):
        return client.get([refs], timeout)[0]
    if isinstance(refs, list | tuple):
        for r in refs:
            if not isinstance(r, ObjectRef):
                raise TypeError(f"get() expects ObjectRefs, got a {type(r).__name__} in the list")
        return client.get(list(refs), timeout)
    from zmesh.generators import ObjectRefGenerator

    if isinstance(refs, ObjectRefGenerator):
        raise TypeError("get() of an ObjectRefGenerator is not allowed: iterate it and get "
                        "each ref, or get(gen.completed()) to wait for the task")
    # Ray's type and words: anything but a ref or a list of refs is a ValueError
    raise ValueError(f"Invalid type of object refs, {type(refs)}, is given. 'object_refs' must "
                     "either be an ObjectRef or a list of ObjectRefs.")


_warned_async_get = False


def _warn_if_blocking_the_event_loop() -> None:
    """Ray's warning, once per process, for a blocking get on an async actor's event loop."""
    global _warned_async_get
    import sys

    aio = sys.modules.get("asyncio")
    if aio is None or aio.events._get_running_loop() is None:
        return
    _warned_async_get = True
    import logging

    logging.getLogger("zmesh").warning(
        "Using blocking zmesh.get inside async actor method. This blocks the event loop. "
        "Please use `await` on object ref with asyncio.gather if you want to yield execution "
        "to the event loop instead.")


def put(value: Any) -> ObjectRef:
    """Store a value in the object store and return a ref to it."""
    return context.current_client().put(value)  # type: ignore[no-any-return]


def wait(refs: Sequence[ObjectRef], *, num_returns: int = 1, timeout: float | None = None,
         fetch_local: bool = True) -> tuple[list[ObjectRef], list[ObjectRef]]:
    """(ready, not ready): returns once num_returns refs are ready or timeout passes."""
    if isinstance(refs, ObjectRef):
        raise TypeError("wait() expects a list of ObjectRefs, not a single ObjectRef")
    refs = list(refs)
    if not refs:
        return [], []
    from zmesh.generators import ObjectRefGenerator, wait_mixed

    for r in refs:
        if not isinstance(r, ObjectRef | ObjectRefGenerator):
            raise TypeError(f"wait() expects a list of ObjectRefs, got a {type(r).__name__} "
                            "in the list")
    if len(set(refs)) != len(refs):
        raise ValueError("wait() got duplicate ObjectRefs")
    if not 0 <= num_returns <= len(refs):
        raise ValueError(f"num_returns={num_returns} must be between 0 and {len(refs)}")
    if any(isinstance(r, ObjectRefGenerator) for r in refs):
        return wait_mixed(context.current_client(), refs, num_returns, timeout)
    return context.current_client().wait(refs, num_returns, timeout)  # type: ignore[no-any-return]


def kill(actor: ActorHandle, *, no_restart: bool = True) -> None:
    """Kill an actor's worker now; with no_restart=False it may restart (max_restarts)."""
    if not isinstance(actor, ActorHandle):
        raise ValueError("kill() only supports actor handles (for tasks, use cancel()); "
                         f"got a {type(actor).__name__}")
    client = context.current_client()
    actor._record(client)  # a handle never called here (get_actor) is killed here too
    # calls made from now on queue, then fail or go to the next incarnation: none reach
    # the worker being killed
    client.actors.kill_requested(actor._actor_id, no_restart)
    client.loop.send_threadsafe(client.node_address, m.KillActor(actor_id=actor._actor_id,
                                                                 no_restart=no_restart))


def cancel(ref: Any, *, force: bool = False, recursive: bool = True) -> None:
    """Cancel the task that makes `ref`: queued ones never run, running ones are interrupted."""
    from zmesh.generators import ObjectRefGenerator

    if not isinstance(ref, ObjectRef | ObjectRefGenerator):
        raise TypeError(f"cancel() expects an ObjectRef or ObjectRefGenerator, "
                        f"got {type(ref).__name__}")
    from concurrent.futures import Future

    client = context.current_client()
    task_id = ref.task_id()
    done: Future[bool] = Future()

    def on_loop() -> None:  # after the submission (queued on the loop before us) is known
        try:
            if client.actors.has_call(task_id):
                if not force:
                    client.actors.cancel(task_id, recursive)
                done.set_result(not force)
                return
            client.tasks.cancel(task_id, force, recursive)
            done.set_result(True)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            done.set_exception(exc)

    if threading.current_thread() is client.loop.thread:
        on_loop()
    else:
        client.loop.call_soon(on_loop)
    if not client.loop.wait_future(done, 30):
        raise ValueError("force=True is not supported for actor tasks (as in Ray): kill the "
                         "actor with kill() instead")


def get_actor(name: str, namespace: str | None = None) -> ActorHandle:
    """The handle of a live named actor; ValueError if there is none."""
    if not isinstance(name, str):
        raise TypeError(f"get_actor() needs the actor's name as a str, got {name!r}")
    if not name:
        raise ValueError("get_actor() needs a non-empty actor name")
    if namespace is not None:
        validate_namespace(namespace)
    client = context.current_client()
    handle = named_actor_handle(client, name, namespace or client.namespace)
    if handle is None:
        raise ValueError(f"no actor named {name!r} in namespace {namespace or client.namespace!r}")
    return handle


def available_resources() -> dict[str, float]:
    """Resources free right now across the mesh."""
    return dict(context.current_client().query("available_resources"))


def cluster_resources() -> dict[str, float]:
    """Total resources of the mesh."""
    return dict(context.current_client().query("cluster_resources"))


def nodes() -> list[dict[str, Any]]:
    """One dict per node, as Ray's `ray.nodes()`."""
    return list(context.current_client().query("nodes"))


def timeline(filename: str | None = None) -> list[dict[str, Any]] | None:
    """The recent tasks and actor calls of the whole mesh as Chrome trace events, as Ray's
    `ray.timeline()`: a list of events, or, given `filename`, written there as JSON (open it
    at ui.perfetto.dev or chrome://tracing) and None returned. Each node keeps its last
    20,000 spans; a worker reports the spans it finished about once a second."""
    import json

    from zmesh.runtime.ops_cli import trace_events

    by_node = context.current_client().query("timeline_mesh")
    spans = [span for rows in by_node.values() for span in rows]
    events: list[dict[str, Any]] = trace_events(spans)["traceEvents"]
    if filename is None:
        return events
    with open(filename, "w") as f:
        json.dump(events, f)
    return None
