"""`zmesh node --dashboard-port`: the page, its JSON, Prometheus' /metrics and the secret
that guards them, used as an operator and a scraper would (the page in a real browser)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from cli_helpers import free_port, start_node

DRIVER = """
import sys, zmesh
from zmesh.util import metrics
zmesh.init(address="{hostport}", log_to_driver=False)

@zmesh.remote
class Holder:
    def __init__(self):
        self.served = metrics.Counter("served_total", "calls served", tag_keys=("kind",))
    def ping(self):
        self.served.inc(1, tags={{"kind": "ping"}})
        print("holder pinged", flush=True)
        return "pong"

@zmesh.remote
def breaks():
    raise ValueError("the input was bad")

@zmesh.remote(num_gpus=1)
def needs_a_gpu():
    return 0

h = Holder.options(name="holder").remote()
print(zmesh.get(h.ping.remote()), flush=True)
try:
    zmesh.get(breaks.remote())
except ValueError:
    pass
ref = needs_a_gpu.remote()          # infeasible: no node has a GPU
print("ready", flush=True)
sys.stdin.readline()
"""


@dataclass
class Mesh:
    env: dict[str, str]
    url: str  # with ?token=
    base: str
    token: str
    other: subprocess.Popen[str]



@pytest.fixture
def mesh() -> Iterator[Mesh]:
    root = tempfile.mkdtemp(prefix="zd-", dir="/tmp")
    env = dict(os.environ, TMPDIR=root)
    port = free_port()
    head = subprocess.Popen([sys.executable, "-m", "zmesh", "node", "--num-cpus", "2",
                             "--dashboard-port", str(port)],
                            env=env, text=True, stdout=subprocess.PIPE)
    procs: list[subprocess.Popen[str]] = [head]
    try:
        assert head.stdout is not None
        first, second = head.stdout.readline(), head.stdout.readline()
        url = re.search(r"dashboard:\s+(\S+)", first + second)
        hostport = re.search(r" is up at (\S+)", first + second)
        assert url and hostport, first + second
        other, _ = start_node(env, "--join", hostport.group(1))
        procs.append(other)
        driver = subprocess.Popen([sys.executable, "-c", DRIVER.format(
            hostport=hostport.group(1))], env=env, text=True, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE)
        procs.append(driver)
        assert driver.stdout is not None
        assert driver.stdout.readline().strip() == "pong"
        assert driver.stdout.readline().strip() == "ready"
        base, token = url.group(1).split("/?token=")
        yield Mesh(env, url.group(1), base, token, other)
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        shutil.rmtree(root, ignore_errors=True)


def _get(url: str, token: str | None = None) -> tuple[int, str]:
    req = urllib.request.Request(url)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _until(check: Callable[[], Any], what: str, seconds: float = 60) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.2)  # polling an HTTP endpoint that refreshes on its own


def test_every_route_needs_the_secret(mesh: Mesh) -> None:
    for path in ("/", "/api/state", "/metrics", "/api/logs"):
        status, _ = _get(mesh.base + path)
        assert status == 401, path
        assert _get(mesh.base + path, token="wrong")[0] == 401
    assert _get(mesh.base + "/", token=mesh.token)[0] == 200


def test_state_shows_the_actor_the_infeasible_task_and_the_failure(mesh: Mesh) -> None:
    def state() -> dict[str, Any] | None:
        status, body = _get(mesh.base + "/api/state", token=mesh.token)
        assert status == 200, body
        s: dict[str, Any] = json.loads(body)
        ready = (any(a["name"] == "holder" and a["state"] == "alive" for a in s["actors"])
                 and any(p["infeasible"] for p in s["pending"]) and s["failed"])
        return s if ready else None

    s = _until(state, "the actor, the infeasible task and the failed task in the state")
    holder = next(a for a in s["actors"] if a["name"] == "holder")
    assert holder["pid"] > 0 and holder["node_id"]
    infeasible = next(p for p in s["pending"] if p["infeasible"])
    assert infeasible["name"].endswith("needs_a_gpu") and "GPU" in infeasible["reason"]
    failed = next(f for f in s["failed"] if f["name"].endswith("breaks"))
    assert "ValueError: the input was bad" in failed["error"]
    assert sorted(n["state"] for n in s["nodes"]) == ["alive", "alive"]

    logs = json.loads(_get(f"{mesh.base}/api/logs?node={holder['node_id']}&pid={holder['pid']}",
                           token=mesh.token)[1])
    lines = [ln for f in logs["files"].values() for ln in f["lines"]]
    assert any("holder pinged" in ln for ln in lines)


def test_metrics_are_prometheus_text_with_user_metrics(mesh: Mesh) -> None:
    def scrape() -> str:
        status, body = _get(mesh.base + "/metrics", token=mesh.token)
        assert status == 200, body
        return body if "zmesh_served_total" in body and "zmesh_tasks_failed" in body else ""

    text = _until(scrape, "the user's counter and the failed task in /metrics")
    assert re.search(r'zmesh_tasks_failed_total\{.*name="[^"]*breaks".*\} 1\.0', text), text
    assert re.search(r'zmesh_served_total\{[^}]*kind="ping"[^}]*pid="\d+"[^}]*\} 1\.0', text)
    assert re.search(r'zmesh_tasks_submitted_total\{[^}]*name="[^"]*breaks"[^}]*\} 1\.0', text)
    assert "zmesh_object_store_capacity" in text and "zmesh_messages_received_total" in text


def test_the_page_in_a_browser_shows_the_mesh_and_follows_a_death(mesh: Mesh) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("Debian's chromium is not installed (bash .ci/run installs it)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium,
                                     args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page()
            page.goto(mesh.url)  # sets the cookie and redirects to /
            assert "?token" not in page.url
            expect = sync_api.expect
            expect(page.locator("#actors")).to_contain_text("holder", timeout=60_000)
            expect(page.locator("#actors")).to_contain_text("alive")
            expect(page.locator("#pending")).to_contain_text("infeasible", timeout=60_000)
            expect(page.locator("#pending")).to_contain_text("GPU")
            expect(page.locator("#failed")).to_contain_text("the input was bad",
                                                            timeout=60_000)
            page.locator("#actors tr.actor", has_text="holder").click()
            expect(page.locator("#logs")).to_contain_text("holder pinged", timeout=30_000)
            mesh.other.kill()  # a member dies; the page follows
            mesh.other.wait(15)
            expect(page.locator("#nodes td.dead")).to_have_count(1, timeout=60_000)
            expect(page.locator("#status")).to_contain_text("1 live members", timeout=60_000)
        finally:
            browser.close()
