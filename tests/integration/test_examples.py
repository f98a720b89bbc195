"""Every program in examples/ runs as a user runs it (`python examples/x.py`): exit 0, the
output they promise, and no zmesh process or ipc session directory left behind."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from runtime_fixtures import wait_until

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

# A line each example must print: the result the seed program shows.
EXPECTED = {
    "quickstart.py": "squares: [0, 1, 4, 9, 16]",
    "square_tasks.py": "[0, 1, 4, 9]",
    "counter_actor.py": "final: 10",
    "accumulator_actor.py": "new value: 10",
    "parent_child_actors.py": "Work done by child",
    "sum_matrix.py": "1000000.0",
    "wait_many.py": "processed 100 results as they finished, total 4950",
    "kill_actor.py": "after kill: RayActorError",
    "errors_and_retries.py": "flaky: succeeded after a worker crash",
    "trainer_pipeline.py": "learned weights: [ 2.  -1.   0.5]",
    "placement_group_allreduce.py": "gradients of 'net.0.weight' agree on 2 ranks",
    "mesh_three_nodes.py": "the actor restarts on the other one",
    "rl_weight_sync.py": "rollout weights match the trainer's: True",
    "testing_under_faults.py": "the wrong pipeline breaks under this shrunk plan",
}
SLOW = {"placement_group_allreduce.py", "rl_weight_sync.py"}  # four workers import torch and join gloo groups


def test_every_example_has_an_expected_line():
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted(EXPECTED)


def processes_with_token(token: str) -> list[psutil.Process]:
    """Live processes (of any parentage) that inherited the example's environment token."""
    found = []
    for p in psutil.process_iter(["pid"]):
        try:
            if p.environ().get("ZMESH_EXAMPLE_TEST") == token and \
                    p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except psutil.Error:
            pass
    return found


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A temp dir with a short path: ipc socket paths inside it must stay under 107 bytes."""
    path = tempfile.mkdtemp(prefix="zx-", dir="/tmp")
    yield Path(path)
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=[pytest.mark.slow] if n in SLOW else []) for n in sorted(EXPECTED)])
def test_example_runs_and_prints_its_result(name, short_tmp):
    token = uuid.uuid4().hex
    # TMPDIR holds the ipc session directories, so a leftover one is this run's
    env = dict(os.environ, ZMESH_EXAMPLE_TEST=token, TMPDIR=str(short_tmp))
    proc = subprocess.run([sys.executable, str(EXAMPLES / name)], capture_output=True,
                          text=True, timeout=90, env=env, cwd=EXAMPLES.parent)
    assert proc.returncode == 0, f"{name} exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    assert EXPECTED[name] in proc.stdout, f"{name} printed:\n{proc.stdout}"
    assert wait_until(lambda: not processes_with_token(token)), \
        f"{name} left processes: {[p.cmdline() for p in processes_with_token(token)]}"
    sessions = list(short_tmp.glob("zmesh-*/session-*"))
    assert not sessions, f"{name} left session directories: {sessions}"


def test_readme_example_runs_and_prints_what_its_comments_say(short_tmp):
    readme = (EXAMPLES.parent / "README.md").read_text()
    code = readme.split("```python\n", 1)[1].split("```", 1)[0]
    env = dict(os.environ, TMPDIR=str(short_tmp))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=90, env=env, cwd=short_tmp)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines() == ["[0, 1, 4, 9]", "[1, 2, 3]", "1000000.0"]
