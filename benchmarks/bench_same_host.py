"""Same-host object transfer: nodes on one machine copy store files instead of the socket.

Two parts, each interleaving its variants round by round (A, B, A, B, ...):

`pair` moves one object from a node's transfer half in a child process to one in this
process (both stores under one private root), four ways: CURVE on or off (the endpoints'
`insecure`), and the same-host file copy on or off (`local_root`). With the copy on, the
bytes never touch the socket, so CURVE costs nothing: the two "local" rows should match.

`mesh` is the user's view: a 2-node tcp `zmesh.testing.Cluster` (CURVE, as always); a task
on the second node makes an array, and the timed `get` in the driver on the head pulls it
into the head's store. Variants: this checkout (local copies), this checkout with
ZMESH_LOCAL_COPY=0 (the socket, as before), and, with --before-tree DIR, another checkout
of zmesh run by this interpreter (PYTHONPATH=DIR: e.g. `git worktree add DIR <commit>` of
the code before this change). CPU is the two nodes' user + system seconds during the get
(from /proc), per GB moved.

    python benchmarks/bench_same_host.py [--quick] [--sizes-mib 64,1024] [--rounds N]
        [--only pair|mesh] [--before-tree DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_object_transfer import OBJECT_ID, SHM, MiB, TransferHalf  # noqa: E402


def cpu_of(pid: int | None = None) -> float:
    """User + system CPU seconds (all threads) of this process or `pid`."""
    if pid is None:
        u = resource.getrusage(resource.RUSAGE_SELF)
        return u.ru_utime + u.ru_stime
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")



# -- pair: two transfer halves ----------------------------------------------------------------


class Half(TransferHalf):
    """A node's transfer half (`bench_object_transfer.TransferHalf`), with same-host copies
    on when given a `local_root`."""

    def __init__(self, store_dir: str, capacity: int, insecure: bool,
                 local_root: str | None) -> None:
        super().__init__(store_dir, capacity, insecure=insecure, local_root=local_root)

    def pull(self, source: str, size: int) -> float:
        done = threading.Event()
        marks: list[float] = []
        errors: list[BaseException] = []

        def on_done(object_id: bytes, error: BaseException | None) -> None:
            marks.append(time.perf_counter())
            if error is not None:
                errors.append(error)
            done.set()

        def start() -> None:
            marks.append(time.perf_counter())
            self.transfer.pull(OBJECT_ID, source, size, on_done)

        self.loop.call_soon(start)
        done.wait()
        if errors:
            raise errors[0]
        return marks[1] - marks[0]

    def check_and_free(self, size: int) -> bool:
        def check() -> bool:
            loc = self.store.pin(OBJECT_ID, "bench")
            try:
                with self.mapper.writable(loc) as view:
                    got = np.frombuffer(view, np.uint8)
                    idx = np.linspace(0, size - 1, 4097).astype(np.int64)
                    return bool(np.array_equal(got[idx], (idx.astype(np.uint8) * 7 + 3)))
            finally:
                self.store.unpin(OBJECT_ID, "bench")
                self.transfer.free([OBJECT_ID])

        ok: bool = self.call(check)
        return ok


def serve_pair(root: str, size: int, insecure: bool) -> None:
    """Child: hold the object in a store under `root`, serve until stdin closes."""
    half = Half(os.path.join(root, f"src-{os.getpid()}"), size + 64 * MiB, insecure, None)
    try:
        half.put(size)
        print(half.endpoint.address, flush=True)
        sys.stdin.read()
    finally:
        half.close()


def run_pair(size: int, rounds: int) -> dict[str, Any]:
    from zmesh.security import keys

    creds = keys.process_credentials()  # the child must hold ours: CURVE + ZAP on tcp
    env = dict(os.environ)
    if creds is not None:
        env[keys.TOKEN_ENV] = creds.token
    root = tempfile.mkdtemp(prefix="zsh-bench-", dir=SHM)
    variants = [(curve, local) for local in (True, False) for curve in (True, False)]
    out: dict[str, Any] = {}
    procs: dict[bool, tuple[subprocess.Popen[str], str]] = {}
    halves: dict[tuple[bool, bool], Half] = {}
    try:
        for curve in (True, False):
            proc = subprocess.Popen(
                [sys.executable, __file__, "--serve-pair", root, str(size),
                 "1" if not curve else "0"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
            assert proc.stdout is not None
            address = proc.stdout.readline().strip()
            if not address:
                raise RuntimeError(f"pair source exited with {proc.wait()}")
            procs[curve] = (proc, address)
        for curve, local in variants:
            halves[(curve, local)] = Half(
                os.path.join(root, f"dst-{int(curve)}{int(local)}"), size + 64 * MiB,
                not curve, root if local else None)
        for r in range(rounds + 1):  # round 0 warms (fresh store pages, connections)
            for curve, local in variants:
                proc, address = procs[curve]
                half = halves[(curve, local)]
                c0, s0 = cpu_of(), cpu_of(proc.pid)
                seconds = half.pull(address, size)
                c1, s1 = cpu_of(), cpu_of(proc.pid)
                if not half.check_and_free(size):
                    raise RuntimeError(f"pair {curve=} {local=}: wrong bytes")
                stats = half.call(half.transfer.stats)
                if local and stats.local_copies == 0:
                    raise RuntimeError("the local variant did not copy locally")
                if r:
                    row = out.setdefault(f"curve={'on' if curve else 'off'} "
                                         f"local={'on' if local else 'off'}",
                                         {"s": [], "cpu_s": []})
                    row["s"].append(seconds)
                    row["cpu_s"].append((c1 - c0) + (s1 - s0))
    finally:
        for half in halves.values():
            half.close()
        for proc, _ in procs.values():
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait(30)
        shutil.rmtree(root, ignore_errors=True)
    return out


# -- mesh: a 2-node Cluster, timed driver gets ------------------------------------------------


def mesh_child(size: int, rounds: int) -> None:
    """Child: one Cluster sitting; prints a JSON line of seconds and node CPU per get."""
    import zmesh
    from zmesh.testing import Cluster
    from zmesh.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    @zmesh.remote
    def make(nbytes: int) -> np.ndarray:
        a = np.empty(nbytes, dtype=np.uint8)
        a[:] = 5
        return a

    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "object_store_memory": 2 * size + 256 * MiB})
    far = cluster.add_node(num_cpus=1, resources={"far": 1},
                           object_store_memory=2 * size + 256 * MiB)
    head = cluster.head_node
    assert head is not None
    zmesh.init(address=cluster.address)
    on_far = NodeAffinitySchedulingStrategy(node_id=far.node_id, soft=False)
    times, cpus = [], []
    try:
        for r in range(rounds + 1):
            ref = make.options(scheduling_strategy=on_far).remote(size)
            zmesh.wait([ref], timeout=300, fetch_local=False)
            c0 = cpu_of(head.pid) + cpu_of(far.pid)
            t0 = time.perf_counter()
            arr = zmesh.get(ref, timeout=300)
            t1 = time.perf_counter()
            c1 = cpu_of(head.pid) + cpu_of(far.pid)
            assert arr.nbytes == size and arr[0] == 5 and arr[-1] == 5
            del arr, ref
            if r:  # round 0 warms the nodes' stores and connections
                times.append(t1 - t0)
                cpus.append(c1 - c0)
        stats = cluster.query(head, "transfer")
    finally:
        zmesh.shutdown()
        cluster.shutdown()
    print(json.dumps({"s": times, "cpu_s": cpus,
                      "local_copies": stats.get("local_copies", 0),
                      "bytes_received": stats.get("bytes_received", 0)}), flush=True)


def run_mesh(size: int, rounds: int, sittings: int,
             before_tree: str | None) -> dict[str, Any]:
    variants: list[tuple[str, str, dict[str, str]]] = []
    if before_tree:
        variants.append(("before", sys.executable, {"PYTHONPATH": os.path.abspath(before_tree)}))
    variants += [
        ("local copy", sys.executable, {}),
        ("ZMESH_LOCAL_COPY=0", sys.executable, {"ZMESH_LOCAL_COPY": "0"}),
    ]
    out: dict[str, Any] = {}
    for _ in range(sittings):
        for name, python, extra in variants:
            env = {**os.environ, **extra}
            proc = subprocess.run([python, __file__, "--mesh-child", str(size), str(rounds)],
                                  capture_output=True, text=True, env=env, timeout=900,
                                  cwd=os.path.dirname(os.path.abspath(__file__)))
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
            row = out.setdefault(name, {"s": [], "cpu_s": [], "local_copies": 0,
                                        "bytes_received": 0, "failed": []})
            if proc.returncode or not lines:  # kept and shown: a sitting that failed
                why = proc.stderr.strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
                row["failed"].append(why[0][:300])
                print(f"  {name}: a sitting failed: {why[0][:300]}", file=sys.stderr)
                continue
            got = json.loads(lines[-1])
            row["s"] += got["s"]
            row["cpu_s"] += got["cpu_s"]
            row["local_copies"] += got["local_copies"]
            row["bytes_received"] += got["bytes_received"]
    return out


# -- report -----------------------------------------------------------------------------------


def report(title: str, size: int, rows: dict[str, Any], base: str) -> None:
    gb = size / 1e9
    print(f"\n{title}: {size / MiB:.0f} MiB object")
    print(f"  {'variant':34} {'median s':>9} {'GB/s':>7} {'core-s/GB':>10} {'vs ' + base:>12}")
    base_s = statistics.median(rows[base]["s"]) if rows.get(base, {}).get("s") else None
    for name, row in rows.items():
        for why in row.get("failed", ()):
            print(f"  {name:34} FAILED sitting: {why}")
        if not row["s"]:
            continue
        s = statistics.median(row["s"])
        cpu = statistics.median(row["cpu_s"]) / gb
        ratio = f"{base_s / s:10.2f}x" if base_s else ""
        extra = (f"  (local copies {row['local_copies']}, socket bytes {row['bytes_received']})"
                 if "local_copies" in row else "")
        print(f"  {name:34} {s:9.3f} {gb / s:7.2f} {cpu:10.2f} {ratio:>12}{extra}")
        print(f"  {'':34} runs: {' '.join(f'{x:.3f}' for x in row['s'])}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--quick", action="store_true", help="64 MiB only, 2 rounds")
    p.add_argument("--sizes-mib", default="64,1024")
    p.add_argument("--rounds", type=int, default=3, help="timed rounds per variant")
    p.add_argument("--sittings", type=int, default=2,
                   help="mesh: clusters per variant, interleaved")
    p.add_argument("--only", choices=["pair", "mesh"])
    p.add_argument("--before-tree", help="mesh: also run the zmesh checkout in this directory")
    p.add_argument("--json", help="write the raw figures here")
    p.add_argument("--serve-pair", nargs=3, help=argparse.SUPPRESS)
    p.add_argument("--mesh-child", nargs=2, type=int, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.serve_pair:
        serve_pair(a.serve_pair[0], int(a.serve_pair[1]), a.serve_pair[2] == "1")
        return
    if a.mesh_child:
        mesh_child(*a.mesh_child)
        return
    sizes = [64] if a.quick else [int(x) for x in a.sizes_mib.split(",")]
    rounds = 2 if a.quick else a.rounds
    sittings = 1 if a.quick else a.sittings
    results: dict[str, Any] = {}
    for mib in sizes:
        size = mib * MiB
        if a.only in (None, "pair"):
            rows = run_pair(size, rounds)
            results[f"pair-{mib}MiB"] = rows
            report("pair (transfer halves, loopback tcp)", size, rows,
                   "curve=on local=off")
        if a.only in (None, "mesh"):
            rows = run_mesh(size, rounds, sittings, a.before_tree)
            results[f"mesh-{mib}MiB"] = rows
            report("mesh (2-node Cluster, driver get on the head)", size, rows,
                   "before" if a.before_tree else "ZMESH_LOCAL_COPY=0")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
