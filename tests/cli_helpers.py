"""Running `zmesh` commands and `zmesh node` processes from tests, as an operator would."""

from __future__ import annotations

import re
import subprocess
import sys


def zmesh_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "zmesh", *args], env=env, text=True,
                          capture_output=True, timeout=60)


def start_node(env: dict[str, str], *args: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-m", "zmesh", "node", "--num-cpus", "1", *args],
                            env=env, text=True, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    announce = proc.stdout.readline()
    assert "ZMESH-NODE-READY" not in announce  # internal: only for the launcher
    found = re.search(r" is up at (\S+)", announce)
    assert found, announce
    return proc, found.group(1)
