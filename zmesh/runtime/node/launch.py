"""The node process's command line: parse it, install credentials, start a `Node`, print
how to reach it, and run it until it stops (`zmesh node`, `python -m zmesh.runtime.node.main`).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
from typing import Any

from zmesh.errors import TransportError, ZmeshError
from zmesh.runtime.addresses import host_to_bind
from zmesh.runtime.node.credentials import check_seeds, resolve, save_token
from zmesh.runtime.node.server import Node, total_memory
from zmesh.runtime.node.zygote import set_parent_death_signal
from zmesh.store.sweep import pid_alive

logger = logging.getLogger("zmesh.node")

PARENT_DEATH_SIGNAL = signal.SIGUSR1
"""What Linux sends a private session's node when the thread that started it ends: not
SIGTERM, for a driver that called init() on a thread that ended lives on (the node then
looks whether its driver process is gone, and stops only if it is)."""


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="zmesh-node", allow_abbrev=False)
    p.add_argument("--session-dir", required=True)
    p.add_argument("--num-cpus", type=float, default=float(os.cpu_count() or 1))
    p.add_argument("--num-gpus", type=float, default=0.0)
    p.add_argument("--resources", default="{}")
    p.add_argument("--object-store-memory", type=int, default=0)
    p.add_argument("--parent-pid", type=int, default=0)
    p.add_argument("--job-id", default="")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--join", action="append", default=[])
    p.add_argument("--labels", default="{}")
    p.add_argument("--token", default="", help="the mesh's join token")
    p.add_argument("--token-file", default="", help="a file (mode 0600) holding the token")
    p.add_argument("--insecure", action="store_true", help="no authentication, no encryption")
    p.add_argument("--testing", action="store_true",
                   help="take faults at run time (zmesh.testing clusters only)")
    p.add_argument("--announce", action="store_true",
                   help="print how to join this node and connect a driver (zmesh node)")
    a = p.parse_args(argv)
    resources = _json_arg("--resources", a.resources, float)
    labels = _json_arg("--labels", a.labels, str)
    if a.parent_pid:
        # ignored until the node can look at its driver; the liveness check covers the gap
        signal.signal(PARENT_DEATH_SIGNAL, signal.SIG_IGN)
        set_parent_death_signal(PARENT_DEATH_SIGNAL)
    store_mem = a.object_store_memory or int(total_memory() * 0.3)
    try:
        creds = resolve(token=a.token, token_file=a.token_file, insecure=a.insecure,
                        join=a.join)
        check_seeds(a.join, creds)
    except ZmeshError as exc:
        raise SystemExit(f"zmesh node: {exc}") from None
    if a.insecure:
        logger.warning("zmesh node runs with --insecure: no authentication and no encryption; "
                       "anyone who reaches its port can run code as this user")
    try:
        a.host = host_to_bind(a.host)
    except ValueError as exc:
        raise SystemExit(f"zmesh node: {exc}") from None
    try:
        node = Node(a.session_dir, num_cpus=a.num_cpus, num_gpus=a.num_gpus,
                    resources=resources, object_store_memory=store_mem,
                    parent_pid=a.parent_pid, job_id=a.job_id, host=a.host, port=a.port,
                    labels=labels, insecure=a.insecure, testing=a.testing)
    except TransportError as exc:
        if "Address already in use" in str(exc):
            raise SystemExit(f"zmesh node: port {a.port} on {a.host} is already in use (another "
                             "zmesh node? `zmesh status`); choose another with --port, or "
                             "leave it out for a free one") from None
        raise SystemExit(f"zmesh node: {exc}") from None
    save_token(a.session_dir, creds)
    # The loop thread is this thread: hand the stop to the loop rather than act mid-handler.
    signal.signal(signal.SIGTERM, lambda *x: node.loop.call_soon(node.stop, "SIGTERM"))
    signal.signal(signal.SIGINT, lambda *x: node.loop.call_soon(node.stop, "SIGINT"))
    if a.parent_pid:
        signal.signal(PARENT_DEATH_SIGNAL,
                      lambda *x: node.loop.call_soon(_stop_if_orphaned, node, a.parent_pid))
    info_path = os.path.join(a.session_dir, "node.json")
    with open(os.open(info_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        json.dump({"pid": os.getpid(), "node_id": node.node_id, "address": node.mesh_address,
                   "ipc": node.address, "standalone": a.announce}, f)
    if not a.announce:  # the launcher or test cluster that started us reads this line
        print(f"ZMESH-NODE-READY {node.address} {node.node_id} {node.mesh_address}", flush=True)
    else:
        hostport = node.mesh_address[len("tcp://"):]
        token = f" --token {creds.token}" if creds is not None else " --insecure"
        init_token = f", token=\"{creds.token}\"" if creds is not None else ""
        print(f"zmesh node {node.node_id} is up at {hostport}\n"
              f"  join it:          zmesh node --join {hostport}{token}\n"
              f"  connect a driver: zmesh.init(address=\"{hostport}\"{init_token})\n"
              "  (the join token is a secret: whoever holds it can run code on this mesh)\n"
              "  stop it:          Ctrl-C (or zmesh stop)", flush=True)
    if a.parent_pid:  # the driver stops reading our stdout now
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
    try:
        node.run(join=a.join)
    finally:
        try:
            os.unlink(info_path)
        except OSError:
            pass
    if node.exit_error:
        raise SystemExit(f"zmesh node: {node.exit_error}")


def _stop_if_orphaned(node: Node, parent_pid: int) -> None:
    """The parent-death signal came: stop if the driver process is gone (we were handed to
    another parent), not when only the thread of it that started us ended."""
    if os.getppid() != parent_pid or not pid_alive(parent_pid):
        node.stop("the driver that started this node exited")


def _json_arg(flag: str, text: str, kind: type) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise SystemExit(f"zmesh node: {flag} must be a JSON object: {exc}") from None
    if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, kind if kind is str else (int, float))
            and not isinstance(v, bool) for k, v in value.items()):
        raise SystemExit(f"zmesh node: {flag} must be a JSON object of name -> "
                         f"{'text' if kind is str else 'number'}, got {text!r}")
    return value


def run_main(argv: list[str] | None = None) -> None:
    """`python -m zmesh.runtime.node.main ...`: logging set up, then main."""
    logging.basicConfig(level=os.environ.get("ZMESH_LOG_LEVEL", "WARNING"), stream=sys.stderr)
    main(argv)

