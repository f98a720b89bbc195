"""Ray-compat mode: `import ray` resolves to zmesh in the driver and in every worker, and
the Ray surface libraries touch (state API, util, private state, actor class introspection,
underscore methods) answers as Ray's does. Off unless asked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PROGRAMS = Path(__file__).resolve().parent / "programs"


def run_program(args: list[str], timeout: float = 240) -> dict:
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True,
                          timeout=timeout, cwd=PROGRAMS)
    assert proc.returncode == 0, f"exited {proc.returncode}:\n{proc.stderr[-4000:]}"
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, f"no result printed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    return json.loads(lines[-1][len("RESULT "):])


def check_surface(out: dict) -> None:
    assert out["dir_has_method"] is True
    assert out["getattr_attr"] == "class attribute"
    assert out["getattr_magic"] == "registered"
    assert out["actor_class"] == "Probe"
    assert out["is_actor_class"] is True and out["is_handle"] is True
    assert out["inside"]["module"] == "ray" and out["inside"]["is_zmesh"] is True
    assert out["inside"]["ip"] == "127.0.0.1"
    assert len(out["inside"]["accelerators"]["GPU"]) == 1
    assert out["private"] == "underscore methods are callable"
    assert out["state"] == "ALIVE"
    assert out["util_state"] == "Probe"
    assert out["named"] == ["probe"]
    assert out["per_node"] == 1.0  # two fake GPUs, one held by the probe
    assert out["pg_node"] is True and out["pg_task"] == "in pg"
    assert out["kv"] == "value"


def test_python_m_zmesh_ray_compat_runs_a_ray_program_unchanged():
    check_surface(run_program(["-m", "zmesh.ray_compat", "ray_compat_surface.py"]))


def test_init_ray_compat_turns_the_mode_on_for_the_driver_and_its_workers():
    check_surface(run_program(["ray_compat_surface.py", "--init"]))


def test_ray_compat_is_off_unless_asked():
    env = {k: v for k, v in os.environ.items() if k != "ZMESH_RAY_COMPAT"}
    code = ("import importlib.util, sys, zmesh\n"
            "spec = importlib.util.find_spec('ray')\n"
            "print('zmesh' if spec is not None and 'zmesh' in repr(spec.loader) else 'not zmesh')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env=env)
    assert proc.stdout.strip() == "not zmesh", proc.stderr


@pytest.mark.parametrize("argv", [[], ["-m"]])
def test_python_m_zmesh_ray_compat_without_a_program_prints_usage(argv):
    proc = subprocess.run([sys.executable, "-m", "zmesh.ray_compat", *argv],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "usage: python -m zmesh.ray_compat" in proc.stdout + proc.stderr
