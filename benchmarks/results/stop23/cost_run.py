"""Instructions per operation (cachegrind, every process of the mesh) and CPU per operation
(/proc schedstat), main vs d6d7dde, interleaved: python cost_run.py OUT.jsonl PAIRS WORKLOAD...

For each pair and workload: main N1, main N2, d6 N1, d6 N2 under cachegrind (the order of the
trees flips on every other pair), then one native --cpu run of NCPU operations in each tree.
One JSON row per run. Instructions per op = (I(N2) - I(N1)) / (N2 - N1), I summed over every
process's cachegrind file (driver, node, fork server, workers; see cost_probe.stop_workers).
"""

import glob
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PROBE = os.path.join(HERE, "cost_probe.py")
TREES = {
    "main": ("/work/wt-getcost", "/work/main/.venv/bin/python"),
    "d6": ("/tmp/base-d6", "/tmp/base-d6/.venv/bin/python"),
}
# workload: (N1, N2 under cachegrind, N for the native CPU run)
COUNTS = {
    "tasks_async": (400, 2400, 2000),
    "actor_async": (1000, 6000, 5000),
    "n_n_actor_async": (500, 3000, 5000),
    "get_small": (2000, 27000, 10000),
    "get_small_batch": (2000, 27000, 10000),
    "put_small": (2000, 27000, 10000),
    "put_large": (1, 4, 10),
    "wait_1000": (200, 1000, 1000),
    "pg_create_remove": (50, 250, 1000),
    "idle": (10, 60, 50),
}


def env_for(tree: str) -> dict:
    # a private TMPDIR: a node that takes > 30 s to start under valgrind has a session
    # directory that another start's sweep of dead sessions would take for dead
    tmp = os.path.join(tempfile.gettempdir(), f"costrun-{os.getpid()}")
    os.makedirs(tmp, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=TREES[tree][0], PYTHONHASHSEED="0", TMPDIR=tmp)
    env.pop("VIRTUAL_ENV", None)
    return env


# Workloads whose workers do the work run under callgrind, zeroing each forked process's
# counts at PyOS_AfterFork_Child: a forked process (fork server, worker) otherwise carries its
# parent's count at the fork, and how many spare workers start varies from run to run.
CALLGRIND = {"tasks_async", "actor_async", "n_n_actor_async", "wait_1000"}


def cachegrind(tree: str, workload: str, n: int) -> dict:
    cwd, py = TREES[tree]
    if workload in CALLGRIND:
        tool = ["--tool=callgrind", "--zero-before=PyOS_AfterFork_Child"]
    else:
        tool = ["--tool=cachegrind", "--cache-sim=no", "--branch-sim=no"]
    with tempfile.TemporaryDirectory(prefix="cg-") as d:
        t = time.perf_counter()
        p = subprocess.run(
            ["valgrind", *tool, "--trace-children=yes",
             f"--{tool[0][7:]}-out-file={d}/cg.%p",
             "-q", py, PROBE, workload, str(n)],
            cwd=cwd, env=env_for(tree), capture_output=True, text=True, timeout=900)
        wall = time.perf_counter() - t
        procs = []
        for f in glob.glob(f"{d}/cg.*"):
            cmd, ir = "", None
            with open(f) as fh:
                for line in fh:
                    if line.startswith("cmd:"):
                        cmd = line[4:].strip()
                    elif line.startswith("summary:") and ir is None:
                        ir = int(line.split()[1])
            procs.append({"pid": int(f.rsplit(".", 1)[1]), "ir": ir,
                          "kind": "driver" if "cost_probe" in cmd else "mesh"})
    loop_s = next((float(x.split()[1]) for x in p.stdout.splitlines() if x.startswith("LOOP_S")), None)
    stopped = next((int(x.split()[1]) for x in p.stdout.splitlines() if x.startswith("WORKERS_STOPPED")), None)
    return {"mode": tool[0][7:], "tree": tree, "workload": workload, "n": n, "rc": p.returncode,
            "ir": sum(x["ir"] or 0 for x in procs), "nprocs": len(procs),
            "missing": sum(1 for x in procs if x["ir"] is None), "workers_stopped": stopped,
            "procs": sorted((x["pid"], x["kind"], x["ir"]) for x in procs),
            "loop_s": loop_s, "wall_s": round(wall, 2), "load1": os.getloadavg()[0],
            "stderr_tail": p.stderr[-4000:] if p.returncode else ""}


def native_cpu(tree: str, workload: str, n: int) -> dict:
    cwd, py = TREES[tree]
    p = subprocess.run([py, PROBE, workload, str(n), "--cpu"], cwd=cwd, env=env_for(tree),
                       capture_output=True, text=True, timeout=600)
    row = {"mode": "cpu", "tree": tree, "workload": workload, "n": n, "rc": p.returncode,
           "load1": os.getloadavg()[0]}
    for line in p.stdout.splitlines():
        if line.startswith("CPU_NS"):
            parts = line.split()
            row["cpu_ns"] = int(parts[1])
            row["per_proc"] = parts[2:]
        elif line.startswith("LOOP_S"):
            row["loop_s"] = float(line.split()[1])
    if p.returncode:
        row["stderr_tail"] = p.stderr[-600:]
    return row


def main() -> None:
    out, pairs, workloads = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    with open(out, "a") as fh:
        for pair in range(int(os.environ.get("START_PAIR", "1")), pairs + 1):
            for w in workloads:
                n1, n2, ncpu = COUNTS[w]
                order = ["main", "d6"] if pair % 2 else ["d6", "main"]
                for tree in order:
                    for n in (n1, n2):
                        for _attempt in range(3):  # a start that failed under valgrind is retried
                            row = cachegrind(tree, w, n)
                            if row["rc"] == 0:
                                break
                            fh.write(json.dumps(dict(row, pair=pair, failed=True)) + "\n")
                        row["pair"] = pair
                        fh.write(json.dumps(row) + "\n")
                        fh.flush()
                        print(w, pair, tree, n, row["ir"], row["nprocs"], row["loop_s"], row["rc"],
                              flush=True)
                for tree in order:
                    row = native_cpu(tree, w, ncpu)
                    row["pair"] = pair
                    fh.write(json.dumps(row) + "\n")
                    fh.flush()
                    print(w, pair, tree, "cpu", row.get("cpu_ns"), row["rc"], flush=True)


if __name__ == "__main__":
    main()
