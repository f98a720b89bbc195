"""Python calls per task on the driver's non-main threads (the runtime's loop thread), from
cProfile in each thread the driver starts: python driver_loop_thread_profile.py TREE N OUT
(run from the tree with PYTHONPATH=TREE at N=500 and N=2500; the difference / 2000 is per
task; raw/driver_loop_thread_calls_per_task.txt). Writes OUT (marshal: "file|line|fn" -> calls)."""

import cProfile
import marshal
import sys
import threading

_orig_run = threading.Thread.run
_profs: list[cProfile.Profile] = []


def _run(self: threading.Thread) -> None:
    pr = cProfile.Profile()
    _profs.append(pr)
    pr.enable()
    try:
        _orig_run(self)
    finally:
        pr.disable()


threading.Thread.run = _run  # type: ignore[method-assign]

import zmesh as rt  # noqa: E402  (after the patch: the runtime's threads start in init)

rt.init(num_cpus=2)


@rt.remote
def noop() -> None:
    return None


rt.get([noop.remote() for _ in range(200)])
n = int(sys.argv[2])
refs = [noop.remote() for _ in range(n)]
rt.get(refs)
del refs
rt.shutdown()
calls: dict[str, int] = {}
for pr in _profs:
    pr.create_stats()
    for (path, line, fn), v in pr.stats.items():  # type: ignore[attr-defined]
        key = f"{path.split('zmesh/')[-1].split('site-packages/')[-1]}|{line}|{fn}"
        calls[key] = calls.get(key, 0) + v[1]
with open(sys.argv[3], "wb") as f:
    marshal.dump(calls, f)
