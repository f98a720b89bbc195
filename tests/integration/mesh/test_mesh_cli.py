"""`zmesh node`, `zmesh status`, `zmesh list`, `zmesh stop` as a user runs them."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator

import pytest
from cli_helpers import start_node, zmesh_cli


@pytest.fixture
def private_tmp(tmp_path: os.PathLike[str]) -> Iterator[dict[str, str]]:
    """An environment whose session root is private, so `zmesh stop` sees only our nodes."""
    env = dict(os.environ, TMPDIR=str(tmp_path))
    yield env


def test_two_nodes_status_list_and_a_clean_exit_on_sigint(private_tmp: dict[str, str]) -> None:
    head, hostport = start_node(private_tmp, "--resources", '{"disk": 2}')
    other, _ = start_node(private_tmp, "--join", hostport, "--labels", '{"zone": "b"}')
    try:
        rows: list[dict[str, object]] = []
        for _ in range(100):  # membership converges within a few probe periods
            out = zmesh_cli(private_tmp, "list", "nodes", "--format", "json",
                            "--address", hostport)
            assert out.returncode == 0, out.stderr
            rows = json.loads(out.stdout)
            if len([r for r in rows if r["state"] == "alive"]) == 2:
                break
        assert sorted(r["state"] for r in rows) == ["alive", "alive"]
        assert any(r["labels"] == {"zone": "b"} for r in rows)
        status = zmesh_cli(private_tmp, "status")
        assert status.returncode == 0, status.stderr
        assert "Members:" in status.stdout and "disk" in status.stdout
        other.send_signal(signal.SIGINT)
        assert other.wait(15) == 0
        left = json.loads(zmesh_cli(private_tmp, "list", "nodes", "--format", "json").stdout)
        assert "left" in {r["state"] for r in left}
        stop = zmesh_cli(private_tmp, "stop")
        assert "stopped 1" in stop.stdout
        assert head.wait(15) == 0
    finally:
        for p in (head, other):
            if p.poll() is None:
                p.kill()
                p.wait()


def test_bad_resources_json_is_refused_naming_the_flag(private_tmp: dict[str, str]) -> None:
    out = zmesh_cli(private_tmp, "node", "--resources", "[1, 2]")
    assert out.returncode != 0
    assert "--resources" in out.stderr
