"""The operator's subcommands of `zmesh`: `timeline`, `logs`, `memory`.

Each asks every live member of the mesh (through any one of them, as `status` does) and
prints or writes what they keep: task spans as a Chrome/Perfetto trace, worker logs, and
the objects in each node's store.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import msgspec

from zmesh.errors import ZmeshError
from zmesh.runtime.mesh_cli import address_arg, credentials_for, entry_address
from zmesh.runtime.node.query import NodeQuerier

Sub = Any  # argparse._SubParsersAction


def _members(q: NodeQuerier, address: str | None) -> list[dict[str, Any]]:
    rows = q.query(entry_address(address), "nodes")
    return [r for r in rows if r["Alive"]]


def _ask_all(args: argparse.Namespace, what: str, arg: bytes = b"") -> list[tuple[str, Any]]:
    """(node id, answer) from every live member; members that fail to answer are skipped
    with a warning on stderr."""
    out: list[tuple[str, Any]] = []
    with NodeQuerier(credentials=credentials_for(args, args.address)) as q:
        for row in _members(q, args.address):
            try:
                out.append((row["NodeID"], q.query(row["Address"], what, arg)))
            except ZmeshError as exc:
                print(f"zmesh: node {row['NodeID'][:12]} did not answer: {exc}", file=sys.stderr)
    return out


# -- zmesh timeline ------------------------------------------------------------------------
def add_timeline_command(subparsers: Sub) -> None:
    p = subparsers.add_parser(
        "timeline", help="write recent tasks and actor calls as a Chrome/Perfetto trace",
        description="Collect the task and actor-call spans every node keeps and write them "
                    "as a trace: open it at ui.perfetto.dev or chrome://tracing.")
    p.add_argument("--output", default="timeline.json", metavar="FILE",
                   help="where to write the trace (default timeline.json)")
    address_arg(p)
    p.set_defaults(handler=run_timeline)


def trace_events(spans: list[dict[str, Any]]) -> dict[str, Any]:
    """Chrome trace-event JSON: one process per node, one thread per worker pid."""
    events: list[dict[str, Any]] = []
    nodes: dict[str, int] = {}
    for s in sorted(spans, key=lambda s: s["start"]):
        node_pid = nodes.setdefault(s["node_id"], len(nodes) + 1)
        events.append({"name": s["name"], "cat": s["kind"], "ph": "X",
                       "ts": s["start"] * 1e6, "dur": max(0.0, s["end"] - s["start"]) * 1e6,
                       "pid": node_pid, "tid": s["pid"],
                       "args": {"task_id": s["task_id"], "ok": s["ok"],
                                "node_id": s["node_id"], "worker_pid": s["pid"]}})
    for node_id, node_pid in nodes.items():
        events.append({"name": "process_name", "ph": "M", "pid": node_pid,
                       "args": {"name": f"node {node_id[:12]}"}})
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def run_timeline(args: argparse.Namespace) -> int:
    try:
        spans = [s for _, got in _ask_all(args, "timeline") for s in got]
    except ZmeshError as exc:
        print(f"zmesh timeline: {exc}", file=sys.stderr)
        return 1
    with open(args.output, "w") as f:
        json.dump(trace_events(spans), f)
    print(f"wrote {len(spans)} task spans to {args.output}; open it at https://ui.perfetto.dev "
          "or chrome://tracing")
    return 0


# -- zmesh logs ----------------------------------------------------------------------------
def add_logs_command(subparsers: Sub) -> None:
    p = subparsers.add_parser("logs", help="print the logs of workers, actors or tasks",
                              description="Print what workers printed, as their nodes keep "
                                          "it (rotated, bounded).")
    who = p.add_mutually_exclusive_group()
    who.add_argument("--actor", metavar="NAME", help="the worker running this named actor")
    who.add_argument("--task", metavar="ID", help="the lines printed while this task ran")
    who.add_argument("--pid", type=int, help="one worker by process id")
    p.add_argument("--node", metavar="ID", help="only this node (an id prefix is enough)")
    p.add_argument("--follow", "-f", action="store_true", help="keep printing new lines")
    address_arg(p)
    p.set_defaults(handler=run_logs)


def run_logs(args: argparse.Namespace) -> int:
    sel: dict[str, Any] = {k: v for k, v in (("actor", args.actor), ("task", args.task),
                                             ("pid", args.pid)) if v}
    offsets: dict[str, dict[str, int]] = {}
    try:
        credentials = credentials_for(args, args.address)
        while True:
            found = False
            with NodeQuerier(credentials=credentials) as q:
                for row in _members(q, args.address):
                    node_id = row["NodeID"]
                    if args.node and not node_id.startswith(args.node):
                        continue
                    arg = msgspec.msgpack.encode({**sel, "offsets": offsets.get(node_id, {})})
                    got = q.query(row["Address"], "logs", arg)
                    found = found or bool(got["found"])
                    for name, f in got["files"].items():
                        offsets.setdefault(node_id, {})[name] = f["offset"]
                        for line in f["lines"]:
                            print(line)
            sys.stdout.flush()
            if not args.follow:
                if not found and sel:
                    what = ", ".join(f"{k} {v}" for k, v in sel.items())
                    print(f"zmesh logs: no node has logs for {what}", file=sys.stderr)
                    return 1
                return 0
            time.sleep(1.0)  # polling interval of --follow, not a synchronization
    except ZmeshError as exc:
        print(f"zmesh logs: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0


# -- zmesh memory --------------------------------------------------------------------------
def add_memory_command(subparsers: Sub) -> None:
    p = subparsers.add_parser("memory", help="objects in the stores: owner, size, where, pins",
                              description="List the objects every node's store holds (Ray's "
                                          "`ray memory`), grouped by owner.")
    p.add_argument("--format", choices=("table", "json"), default="table")
    address_arg(p)
    p.set_defaults(handler=run_memory)


def memory_report(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every object the mesh holds: its copies in the stores, and the references that keep
    it alive in each driver and worker (asked directly, like Ray's `ray memory`)."""
    objects: dict[str, dict[str, Any]] = {}

    def entry(oid: str, owner: str) -> dict[str, Any]:
        return objects.setdefault(oid, {"object_id": oid, "owner": owner, "size": None,
                                        "copies": [], "references": []})

    with NodeQuerier(credentials=credentials_for(args, args.address)) as q:
        for row in _members(q, args.address):
            try:
                got = q.query(row["Address"], "memory")
            except ZmeshError as exc:
                print(f"zmesh: node {row['NodeID'][:12]} did not answer: {exc}",
                      file=sys.stderr)
                continue
            for o in got["objects"]:
                e = entry(o["object_id"], o["owner"])
                e["size"] = o["size"]
                e["copies"].append({"node_id": row["NodeID"], "copy": o["copy"],
                                    "state": o["state"], "pinned_by": o["pinned_by"]})
            for client in got.get("clients", []):
                try:
                    refs = q.query(client["address"], "refs", timeout=2.0)
                except ZmeshError:
                    continue  # exiting, or busy past the deadline: its refs are not shown
                holder = f"{client['kind']} pid {client['pid']}"
                for r in refs["refs"]:
                    if r["kinds"]:
                        entry(r["object_id"], r["owner"])["references"].append(
                            {"holder": holder, "node_id": row["NodeID"],
                             "kinds": r["kinds"], "borrowers": r["borrowers"]})
    return sorted(objects.values(), key=lambda o: (o["owner"], -(o["size"] or 0)))


def run_memory(args: argparse.Namespace) -> int:
    try:
        rows = memory_report(args)
    except ZmeshError as exc:
        print(f"zmesh memory: {exc}", file=sys.stderr)
        return 1
    if args.format == "json":
        print(json.dumps(rows, indent=2))
        return 0
    total = sum(r["size"] or 0 for r in rows)
    print(f"======== zmesh memory: {len(rows)} objects, {_size(total)} in stores ========")
    by_owner: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_owner.setdefault(r["owner"], []).append(r)
    for owner, objs in sorted(by_owner.items()):
        print(f"owner {owner}: {len(objs)} objects")
        for o in objs:
            size = _size(o["size"]) if o["size"] is not None else "inline"
            where = ",".join(f"{c['node_id'][:12]}({c['copy']})" for c in o["copies"]) or "-"
            held = "; ".join(f"{ref['holder']}: {'+'.join(ref['kinds'])}"
                             for ref in o["references"]) or "no references"
            pins = ",".join(p for c in o["copies"] for p in c["pinned_by"]) or "-"
            print(f"  {o['object_id'][:16]}  {size:>10}  in {where}  pinned by {pins}  {held}")
    return 0


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


# -- zmesh dashboard -----------------------------------------------------------------------
def add_dashboard_command(subparsers: Sub) -> None:
    p = subparsers.add_parser(
        "dashboard", help="serve the web dashboard and Prometheus /metrics of a mesh",
        description="Serve a live page of members, actors, tasks, objects, groups and worker "
                    "logs, and /metrics for Prometheus, for the mesh of any member. Every "
                    "request needs the secret in the printed URL (or a Bearer header).")
    p.add_argument("--host", default="127.0.0.1", help="address to serve on (default loopback)")
    p.add_argument("--port", type=int, default=8265, help="port (default 8265, as Ray's)")
    p.add_argument("--session-dir", help=argparse.SUPPRESS)  # set by `zmesh node --dashboard`
    p.add_argument("--parent-pid", type=int, default=0, help=argparse.SUPPRESS)
    address_arg(p)
    p.set_defaults(handler=run_dashboard)


def run_dashboard(args: argparse.Namespace) -> int:
    import os

    try:
        import prometheus_client  # noqa: F401

        from zmesh.dashboard.server import Dashboard
    except ImportError:
        print("zmesh dashboard: needs prometheus_client: pip install 'zmesh[ops]'",
              file=sys.stderr)
        return 2
    address = args.address
    if args.session_dir:
        address = _wait_for_node(args.session_dir)
        if address is None:
            return 1
    try:
        dash = Dashboard(address, args.host, args.port,
                         credentials=credentials_for(args, address),
                         token=os.environ.pop("ZMESH_DASHBOARD_TOKEN", None) or None)
    except OSError as exc:
        print(f"zmesh dashboard: cannot serve on {args.host}:{args.port}: {exc.strerror}; "
              "choose another --port", file=sys.stderr)
        return 1
    print(f"zmesh dashboard at {dash.url}", flush=True)
    if args.parent_pid:
        _exit_with(args.parent_pid)
    try:
        dash.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        dash.reader.close()
    return 0


def _wait_for_node(session_dir: str, timeout: float = 60.0) -> str | None:
    """The tcp address of the node starting in `session_dir`, from its node.json."""
    import os

    path = os.path.join(session_dir, "node.json")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(path) as f:
                return str(json.load(f)["address"])
        except (OSError, ValueError, KeyError):
            time.sleep(0.1)  # polling a file another process writes once
    print(f"zmesh dashboard: no node started in {session_dir}", file=sys.stderr)
    return None


def _exit_with(parent: int) -> None:
    """Exit this process when `parent` (the node that started it) is gone."""
    import os
    import threading

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)  # polling the parent: there is no event for its death
        os._exit(0)

    threading.Thread(target=watch, daemon=True, name="zmesh-parent-watch").start()


OPS_COMMANDS = [add_timeline_command, add_logs_command, add_memory_command,
                add_dashboard_command]
