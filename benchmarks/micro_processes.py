"""The fresh-process workloads of `zmesh microbenchmark`: start-up time and memory.

Each sample runs in a new Python process (`microbenchmark.py --_child startup|memory`), so
imports and start-up are paid honestly; definitions mirror the anchor benchmark's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from micro_workloads import NUM_CPUS, REPEATS, Cfg, Results, metric

# zmesh is imported inside the children only: its import time and memory are measured there
CHILD_MARK = "@@MICRO_CHILD@@"
# set in the memory child before the runtime starts: a process that inherits it but is no
# longer a descendant of the driver (re-parented) still counts as the runtime's
MARK_ENV = "ZMESH_MICROBENCH_RUN"
perf = time.perf_counter


def _wait_gone(procs: list[Any], timeout_s: float) -> list[Any]:
    """Processes captured before shutdown that still run after up to `timeout_s`."""
    import psutil

    left: list[Any] = []
    end = perf() + timeout_s
    while perf() < end:
        left = []
        for p in procs:
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    left.append(p)
            except psutil.Error:
                pass
        if not left:
            break
        time.sleep(0.05)  # polling process exits: there is no event to wait on
    return left


def child_startup() -> dict[str, Any]:
    """import zmesh, init, first task, shutdown: each timed, in this fresh process."""
    import psutil

    me = psutil.Process()
    t0 = perf()
    import zmesh as rt

    t1 = perf()
    rt.init(num_cpus=NUM_CPUS)
    t2 = perf()

    @rt.remote
    def one() -> int:
        return 1

    assert rt.get(one.remote()) == 1
    t3 = perf()
    kids = me.children(recursive=True)
    rt.shutdown()
    t4 = perf()
    left = _wait_gone(kids, 10.0)
    return {"import_s": t1 - t0, "init_s": t2 - t1, "init_plus_first_get_s": t3 - t1,
            "shutdown_s": t4 - t3, "procs_before_shutdown": len(kids),
            "procs_left_10s_after_shutdown": len(left), "procs_gone_after_s": perf() - t4}


def _proc_mem(p: Any) -> tuple[int, int | None]:
    rss = p.memory_info().rss
    try:
        pss = p.memory_full_info().pss
    except Exception:  # PSS needs /proc/<pid>/smaps_rollup, not readable everywhere
        pss = None
    return rss, pss


def child_memory(settle_s: float) -> dict[str, Any]:
    """RSS and PSS of every runtime process plus the driver's growth, `settle_s` after init."""
    import psutil

    me = psutil.Process()
    token = f"{me.pid}-{time.time_ns()}"
    os.environ[MARK_ENV] = token
    pre_pids = set(psutil.pids())
    driver_before_import = me.memory_info().rss
    import zmesh

    driver_before_init = me.memory_info().rss
    zmesh.init(num_cpus=NUM_CPUS)

    @zmesh.remote
    def one() -> int:
        return 1

    assert zmesh.get(one.remote()) == 1
    time.sleep(settle_s)  # the anchor's definition: measure once helpers have settled
    procs = {c.pid: c for c in me.children(recursive=True)}
    for p in psutil.process_iter(["pid"]):
        if p.pid in pre_pids or p.pid in procs or p.pid == me.pid:
            continue
        try:
            if p.environ().get(MARK_ENV) == token:
                procs[p.pid] = p
        except psutil.Error:
            pass
    rss_sum, pss_sum, pss_ok, per = 0, 0, True, []
    for p in procs.values():
        try:
            rss, pss = _proc_mem(p)
            name = p.name()
        except psutil.Error:
            continue
        rss_sum += rss
        pss_ok = pss_ok and pss is not None
        pss_sum += pss or 0
        per.append((name, round(rss / 1e6, 1)))
    drv_rss, drv_pss = _proc_mem(me)
    out: dict[str, Any] = {
        "n_procs": len(per), "procs_rss_mb": sorted(per, key=lambda x: -x[1]),
        "driver_delta_from_before_init_mb": (drv_rss - driver_before_init) / 1e6,
        "total_rss_mb": (rss_sum + drv_rss - driver_before_import) / 1e6,
    }
    if pss_ok and drv_pss is not None:
        out["total_pss_mb"] = (pss_sum + max(0, drv_pss - driver_before_import)) / 1e6
    zmesh.shutdown()
    out["procs_left_10s_after_shutdown"] = len(_wait_gone(list(procs.values()), 10.0))
    return out


def run_child(kind: str, extra: list[str], timeout: int = 300) -> dict[str, Any]:
    """Run `microbenchmark.py --_child kind` in a fresh interpreter; its JSON result."""
    script = Path(__file__).resolve().parent / "microbenchmark.py"
    cmd = [sys.executable, str(script), "--_child", kind, *extra]
    cp = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    for line in cp.stdout.splitlines():
        if line.startswith(CHILD_MARK):
            result: dict[str, Any] = json.loads(line[len(CHILD_MARK):])
            return result
    raise RuntimeError(f"benchmark child {kind!r} failed (exit {cp.returncode}):\n"
                       f"{cp.stderr[-3000:]}")


def w_startup(cfg: Cfg) -> Results:
    runs = [run_child("startup", []) for _ in range(cfg.n(REPEATS, 1))]
    return {
        "startup": metric([r["init_plus_first_get_s"] for r in runs], "s", "lower",
                          how="init(num_cpus=2) + first get of a trivial task, fresh process",
                          procs_left_10s_after_shutdown=[r["procs_left_10s_after_shutdown"]
                                                         for r in runs]),
        "init_only": metric([r["init_s"] for r in runs], "s", "lower"),
        "shutdown": metric([r["shutdown_s"] for r in runs], "s", "lower"),
        "import": metric([r["import_s"] for r in runs], "s", "lower"),
    }


def w_memory(cfg: Cfg, settle_s: float = 3.0) -> Results:
    runs = [run_child("memory", ["--_settle", str(settle_s)]) for _ in range(cfg.n(REPEATS, 1))]
    out = {"memory_rss_mb": metric(
        [r["total_rss_mb"] for r in runs], "MB", "lower",
        how=f"RSS of every runtime process + driver growth since before import, {settle_s}s "
            "after init and one task, fresh process",
        n_procs=[r["n_procs"] for r in runs], procs_rss_mb_first_run=runs[0]["procs_rss_mb"],
        procs_left_10s_after_shutdown=[r["procs_left_10s_after_shutdown"] for r in runs])}
    if all("total_pss_mb" in r for r in runs):
        out["memory_pss_mb"] = metric([r["total_pss_mb"] for r in runs], "MB", "lower",
                                      how="the same processes, proportional set size")
    return out


SUBPROC = {
    "startup": (w_startup, ["startup", "init_only", "shutdown", "import"]),
    "memory": (w_memory, ["memory_rss_mb", "memory_pss_mb"]),
}
