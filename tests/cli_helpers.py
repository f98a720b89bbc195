"""Running `zmesh` commands and `zmesh node` processes from tests, as an operator would."""

from __future__ import annotations

import re
import socket
import subprocess
import sys


def zmesh_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "zmesh", *args], env=env, text=True,
                          capture_output=True, timeout=60)


def start_node(env: dict[str, str], *args: str) -> tuple[subprocess.Popen[str], str]:
    """Start `zmesh node`; a first node gets a join token in `env` (which later commands and
    drivers started with `env` then share), as an operator would export ZMESH_TOKEN."""
    if "--join" not in args and "--insecure" not in args and not env.get("ZMESH_TOKEN"):
        from zmesh.security.keys import ClusterCredentials

        env["ZMESH_TOKEN"] = ClusterCredentials.generate().token
    proc = subprocess.Popen([sys.executable, "-m", "zmesh", "node", "--num-cpus", "1", *args],
                            env=env, text=True, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    announce = proc.stdout.readline()
    assert "ZMESH-NODE-READY" not in announce  # internal: only for the launcher
    found = re.search(r" is up at (\S+)", announce)
    assert found, announce
    return proc, found.group(1)


def free_port() -> int:
    """A tcp port on loopback that nothing listens on (as of now)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
