"""The mesh subcommands of `zmesh`: `node`, `status`, `list`, `stop`.

`status` and `list` ask a running node (`--address host:port`, else one started on this
machine) and every live member it knows; `stop` signals the nodes started on this machine,
found by the `node.json` each keeps in its session directory.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import time
from typing import Any

from zmesh.errors import AuthenticationError, ZmeshError
from zmesh.runtime.launcher import running_nodes, session_root
from zmesh.runtime.node.query import NodeQuerier
from zmesh.security.keys import ClusterCredentials
from zmesh.store.sweep import pid_alive

Sub = Any  # argparse._SubParsersAction
LIST_KINDS = ("nodes", "actors", "tasks", "objects", "placement-groups")


# -- zmesh node ----------------------------------------------------------------------------
def add_node_command(subparsers: Sub) -> None:
    p = subparsers.add_parser("node", help="run a node in the foreground",
                              description="Run a zmesh node until SIGINT/SIGTERM; with --join "
                                          "it joins the mesh of any running member.")
    p.add_argument("--join", metavar="HOST:PORT", action="append", default=[],
                   help="a running member to join through")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default loopback); any address is safe: every "
                        "tcp connection is encrypted and admitted only with the join token")
    p.add_argument("--port", type=int, default=0, help="tcp port (default: a free one)")
    p.add_argument("--num-cpus", type=float, default=float(os.cpu_count() or 1))
    p.add_argument("--num-gpus", type=float, default=0.0)
    p.add_argument("--resources", default="{}", metavar="JSON", help='e.g. \'{"disk": 2}\'')
    p.add_argument("--object-store-memory", type=int, default=0, metavar="BYTES")
    p.add_argument("--labels", default="{}", metavar="JSON", help='e.g. \'{"zone": "a"}\'')
    _token_args(p, "the join token of the mesh to join (default: a new mesh makes its own)")
    p.add_argument("--insecure", action="store_true",
                   help="run WITHOUT authentication or encryption: anyone who reaches the port "
                        "can run code as you. Only for isolated networks; never the default")
    p.add_argument("--dashboard-port", type=int, default=0, metavar="PORT",
                   help="also serve the web dashboard and /metrics on this port")
    p.set_defaults(handler=run_node)


def _token_args(p: argparse.ArgumentParser, token_help: str) -> None:
    p.add_argument("--token", default="", help=f"{token_help}; or set $ZMESH_TOKEN")
    p.add_argument("--token-file", default="", metavar="PATH",
                   help="a file (mode 0600) holding the join token; or set $ZMESH_TOKEN_FILE")


def credentials_for(args: argparse.Namespace, address: str | None) -> ClusterCredentials | None:
    """The credentials a client command uses: --token, --token-file, the environment, or
    those of a node started on this machine (at `address`, or any)."""
    from zmesh.runtime.node.credentials import local_credentials
    from zmesh.security import keys

    if args.token:
        return ClusterCredentials.from_token(args.token)
    if args.token_file:
        return keys.read_token_file(args.token_file)
    found = keys.from_environment()
    if found is None and os.environ.get(keys.INSECURE_ENV) != "1":
        found = local_credentials([entry_address(address)])
        if found is None:
            raise AuthenticationError(
                f"no join token for the mesh at {address}: pass --token (the token its first "
                "node printed), --token-file, or set ZMESH_TOKEN")
    return found


def run_node(args: argparse.Namespace) -> int:
    from zmesh.runtime.node import launch as node

    if args.insecure:
        print("zmesh node: WARNING: --insecure: no authentication and no encryption. Anyone "
              f"who can reach {args.host} can run code as this user. Use it only on an "
              "isolated network; a normal mesh needs only the join token.", file=sys.stderr)

    # an operator's node logs what happens to the mesh (members joining, leaving, dying)
    logging.basicConfig(level=os.environ.get("ZMESH_LOG_LEVEL", "INFO"), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    session_dir = tempfile.mkdtemp(prefix="session-", dir=session_root())
    argv = ["--session-dir", session_dir, "--num-cpus", str(args.num_cpus),
            "--num-gpus", str(args.num_gpus), "--resources", args.resources,
            "--labels", args.labels, "--object-store-memory", str(args.object_store_memory),
            "--host", args.host, "--port", str(args.port), "--announce"]
    for seed in args.join:
        argv += ["--join", seed]
    argv += ["--insecure"] if args.insecure else []
    argv += ["--token", args.token] if args.token else []
    argv += ["--token-file", args.token_file] if args.token_file else []
    dashboard = None
    if args.dashboard_port:
        dashboard, url = start_dashboard_child(session_dir, args.host, args.dashboard_port)
        print(f"  dashboard:        {url}", flush=True)
    try:
        node.main(argv)
    except SystemExit as exc:
        if exc.code not in (None, 0):
            print(exc.code, file=sys.stderr)
            return 2
    finally:
        if dashboard is not None:
            dashboard.terminate()
            dashboard.wait(10)
        shutil.rmtree(session_dir, ignore_errors=True)
    print("zmesh node stopped", flush=True)
    return 0


# -- zmesh status / list -------------------------------------------------------------------
def address_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--address", metavar="HOST:PORT",
                   help="any member (default: a node started on this machine)")
    _token_args(p, "the mesh's join token (default: that of a node on this machine)")


def add_status_command(subparsers: Sub) -> None:
    p = subparsers.add_parser("status", help="members, resources, actors, placement groups")
    address_arg(p)
    p.set_defaults(handler=run_status)


def add_list_command(subparsers: Sub) -> None:
    p = subparsers.add_parser("list", help="list nodes, actors, tasks, objects or groups")
    p.add_argument("kind", choices=LIST_KINDS)
    p.add_argument("--format", choices=("table", "json"), default="table")
    address_arg(p)
    p.set_defaults(handler=run_list)


def entry_address(address: str | None) -> str:
    if address:
        return address
    nodes = running_nodes()
    if not nodes:
        raise ZmeshError("no running zmesh node on this machine; start one with `zmesh node` "
                         "or pass --address HOST:PORT")
    nodes.sort(key=lambda n: not n.get("standalone"))  # a `zmesh node` before private ones
    return str(nodes[0]["address"])


def gather(address: str | None, timeout: float = 5.0,
           credentials: ClusterCredentials | None = None) -> dict[str, Any]:
    """Every live member's state: {"nodes": [...], "per_node": {node_id: {...}}}."""
    from zmesh.security.probe import handshake

    entry = entry_address(address)
    entry = entry if entry.startswith(("tcp://", "ipc://")) else f"tcp://{entry}"
    handshake(entry, credentials, timeout=timeout)  # a wrong token fails here, at once
    with NodeQuerier(credentials=credentials) as q:
        members = q.query(entry, "nodes", timeout=timeout)
        per_node: dict[str, dict[str, Any]] = {}
        for row in members:
            if not row["Alive"]:
                continue
            got: dict[str, Any] = {}
            for what in ("actors", "placement_groups", "store", "pending", "leases"):
                try:
                    got[what] = q.query(row["Address"], what, timeout=timeout)
                except ZmeshError as exc:
                    got[what] = {"error": str(exc)}
            per_node[row["NodeID"]] = got
    return {"nodes": members, "per_node": per_node}


def _rows(kind: str, state: dict[str, Any]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    if kind == "nodes":
        for n in state["nodes"]:
            rows.append({"node_id": n["NodeID"], "state": n["State"], "address": n["Address"],
                         "resources": n["Resources"], "available": n["Available"],
                         "labels": n["Labels"]})
        return rows
    if kind == "actors":
        return actor_rows(state)
    for node_id, got in state["per_node"].items():
        if kind == "placement-groups":
            for pg in (got.get("placement_groups") or {}).values():
                if isinstance(pg, dict) and "placement_group_id" in pg:
                    rows.append({"node_id": node_id, **pg})
        elif kind == "tasks":
            for le in got.get("leases") or []:
                if isinstance(le, dict):
                    rows.append({"node_id": node_id, "kind": "lease", **le})
            for p in got.get("pending") or []:
                if isinstance(p, dict):
                    rows.append({"node_id": node_id, "state": "infeasible" if p["infeasible"]
                                 else "pending", **p})
        elif kind == "objects":
            st = got.get("store") or {}
            rows.append({"node_id": node_id, **st})
    return rows


def actor_rows(state: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per actor. Several nodes know an actor (its home, the node running it, the
    nodes that forwarded it); the row of the node running it wins, else the first seen."""
    best: dict[str, dict[str, Any]] = {}
    for node_id, got in state["per_node"].items():
        for actor_id, a in (got.get("actors") or {}).items():
            if not (isinstance(a, dict) and "class_name" in a):
                continue
            row = {"actor_id": actor_id, "node_id": node_id, **a}
            hosted = bool(row.pop("hosted", False))
            if actor_id not in best or (hosted and not best[actor_id]["_hosted"]):
                best[actor_id] = {**row, "_hosted": hosted}
    rows = []
    for row in best.values():
        if not row.pop("_hosted"):
            row["node_id"] = ""  # no node that runs it answered: do not guess
        rows.append(row)
    return rows


def run_list(args: argparse.Namespace) -> int:
    try:
        rows = _rows(args.kind, gather(args.address,
                                       credentials=credentials_for(args, args.address)))
    except ZmeshError as exc:
        print(f"zmesh list: {exc}", file=sys.stderr)
        return 1
    if args.format == "json":
        print(json.dumps(rows, indent=2, default=str))
    else:
        _print_table(rows)
    return 0


def _print_table(rows: list[dict[str, Any]]) -> None:
    if not rows:
        print("(none)")
        return
    cols = list(dict.fromkeys(k for r in rows for k in r))
    cells = [[_cell(r.get(c, "")) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    print("  ".join(c.upper().ljust(w) for c, w in zip(cols, widths, strict=True)))
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)))


def _cell(v: Any) -> str:
    if isinstance(v, dict):
        return ",".join(f"{k}={_num(x)}" for k, x in sorted(v.items())
                        if not str(k).startswith(("node:", "memory", "object_store")))
    return _num(v)


def _num(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def run_status(args: argparse.Namespace) -> int:
    try:
        state = gather(args.address, credentials=credentials_for(args, args.address))
    except ZmeshError as exc:
        print(f"zmesh status: {exc}", file=sys.stderr)
        return 1
    print("======== zmesh status ========")
    print("Members:")
    for n in state["nodes"]:
        total, free = n["Resources"], n["Available"]
        used = ", ".join(f"{total[k] - free.get(k, 0.0):g}/{total[k]:g} {k}"
                         for k in sorted(total) if not k.startswith(("node:", "memory",
                                                                     "object_store")))
        print(f"  {n['NodeID'][:12]}  {n['State']:<7} {n['Address']:<22} {used}")
    for title, kind in (("Actors", "actors"), ("Placement groups", "placement-groups"),
                        ("Pending / infeasible work", "tasks")):
        rows = _rows(kind, state)
        if kind == "tasks":  # waiting work: not granted or forwarded leases
            rows = [r for r in rows if r.get("kind") != "lease"
                    and r.get("state") in ("pending", "infeasible")]
        print(f"{title}: {len(rows)}")
        for r in rows:
            if kind == "actors":
                print(f"  {r['actor_id'][:12]}  {r['class_name']:<20} {r['state']:<11} "
                      f"node {r['node_id'][:12] or '?':<12}  {r.get('name') or ''}")
            elif kind == "placement-groups":
                print(f"  {r['placement_group_id'][:12]}  {r['strategy']:<13} {r['state']:<8} "
                      f"{r.get('reason', '')}")
            else:
                print(f"  {r['state']:<10} {r['name']}: {r.get('reason') or 'waiting'}")
    print("Object stores:")
    for r in _rows("objects", state):
        used, cap = r.get("used_bytes", r.get("used", "?")), r.get("capacity", "?")
        print(f"  {r['node_id'][:12]}  used {used} of {cap} bytes")
    return 0


# -- zmesh stop ----------------------------------------------------------------------------
def add_stop_command(subparsers: Sub) -> None:
    p = subparsers.add_parser("stop", help="stop the `zmesh node` processes on this machine "
                                           "(never the private nodes of running scripts)")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds before SIGKILL")
    p.set_defaults(handler=run_stop)


def run_stop(args: argparse.Namespace) -> int:
    # only nodes started with `zmesh node`: the private nodes of running `zmesh.init()`
    # scripts and test clusters belong to their processes, which stop them themselves
    nodes = [n for n in running_nodes() if n.get("standalone")]
    for info in nodes:
        try:
            os.kill(int(info["pid"]), signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + args.timeout
    for info in nodes:
        pid = int(info["pid"])
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)
    print(f"stopped {len(nodes)} zmesh node(s)")
    return 0


MESH_COMMANDS = [add_node_command, add_status_command, add_list_command, add_stop_command]


def start_dashboard_child(session_dir: str, host: str, port: int) -> tuple[Any, str]:
    """For `zmesh node --dashboard-port`: the dashboard process of this node, and its URL."""
    import os
    import secrets
    import subprocess

    token = secrets.token_urlsafe(24)
    proc = subprocess.Popen(
        [sys.executable, "-m", "zmesh", "dashboard", "--session-dir", session_dir,
         "--host", host, "--port", str(port), "--parent-pid", str(os.getpid())],
        env={**os.environ, "ZMESH_DASHBOARD_TOKEN": token}, stdout=subprocess.DEVNULL)
    shown = f"[{host}]" if ":" in host else host
    return proc, f"http://{shown}:{port}/?token={token}"
