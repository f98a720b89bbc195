"""`import zmesh` loads the public API, not the runtime: init() imports the client while its
node process starts, so a program pays for it once and a node or tool never does."""

from __future__ import annotations

import json
import subprocess
import sys

RUNTIME_ONLY = ("zmesh.runtime.owner.client", "zmesh.runtime.owner.submit",
                "zmesh.runtime.owner.actor_calls", "zmesh.runtime.loop", "zmq")


def test_import_zmesh_leaves_the_runtime_client_and_zmq_out() -> None:
    code = ("import json, sys, zmesh; zmesh.remote; zmesh.get; zmesh.ObjectRef; "
            f"print(json.dumps([m for m in {list(RUNTIME_ONLY)!r} if m in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)
    assert json.loads(out.stdout) == []


def test_a_driver_starts_its_node_before_it_imports_zmq() -> None:
    """init() makes its credentials and starts its node process first: everything before that
    holds the node back, so zmq (imported meanwhile, by the client) is not among it."""
    code = ("import json, sys, zmesh\n"
            "from zmesh.runtime.launcher import new_session_dir, start_node\n"
            "from zmesh.security.keys import process_credentials\n"
            "creds = process_credentials(); creds.token\n"
            "before = 'zmq' in sys.modules\n"
            "public = creds.curve_public  # worked out on first use\n"
            "print(json.dumps([before, 'zmq' in sys.modules, len(public)]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)
    assert json.loads(out.stdout) == [False, True, 40]


def test_the_fork_servers_pre_imports_leave_numpy_out() -> None:
    """The fork server imports the worker's modules before its first fork; numpy there (~50
    ms) is time the first task after `init()` waits for (prestarted workers import it only if
    their tasks use it). tensor_transport's package once imported it for every actor caller."""
    code = ("import json, sys, zmesh.runtime.worker.main, zmesh.runtime.owner.actor_calls; "
            "print(json.dumps('numpy' in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)
    assert json.loads(out.stdout) is False
