"""How long the first task's get waits after init() returns (the fork server's readiness)."""

import time

t0 = time.perf_counter()
import zmesh  # noqa: E402  (timed)


@zmesh.remote
def f() -> int:
    return 1


t1 = time.perf_counter()
zmesh.init(num_cpus=2)
t2 = time.perf_counter()
zmesh.get(f.remote())
t3 = time.perf_counter()
zmesh.shutdown()
print(f"import {1e3 * (t1 - t0):.0f} init {1e3 * (t2 - t1):.0f} firstget {1e3 * (t3 - t2):.0f} ms")
