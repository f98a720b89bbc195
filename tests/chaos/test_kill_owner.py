"""KillOwner on real processes: a driver the program started, registered with the local
cluster by name, is SIGKILLed at its step; the test's own driver keeps working, and after
shutdown no process, store directory or fd is left behind."""

from __future__ import annotations

import signal
import subprocess
import sys

import zmesh
from zmesh.testing import FaultPlan, KillOwner
from zmesh.testing.local_cluster import LocalCluster

SECOND_DRIVER = """
import sys, threading, zmesh
zmesh.init(address=sys.argv[1], token=sys.argv[2])
ref = zmesh.put(list(range(1000)))
print("ready", flush=True)
threading.Event().wait(120)  # killed long before
"""


@zmesh.remote(max_retries=-1)
def double(x: int) -> int:
    return 2 * x


def test_kill_owner_sigkills_a_driver_the_program_started() -> None:
    plan = FaultPlan(seed=1, nodes=2, unit="step", faults=(KillOwner(at=1, name="second"),))
    assert plan.validate("local") == []
    mesh = LocalCluster(2, plan, num_cpus=1)
    with mesh:
        proc = subprocess.Popen([sys.executable, "-c", SECOND_DRIVER, mesh.address,
                                 mesh.cluster.token], stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
            mesh.add_owner("second", proc.pid)
            mesh.step()  # step 0: no fault yet
            assert proc.poll() is None and mesh.faults_injected() == 0
            mesh.step()  # step 1: the owner dies
            assert proc.wait(timeout=30) == -signal.SIGKILL
            assert mesh.faults_injected() == 1
            assert "kill owner" in mesh.report()
            assert zmesh.get([double.remote(i) for i in range(4)], timeout=60) == [0, 2, 4, 6]
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
    assert mesh.leaks() == []
