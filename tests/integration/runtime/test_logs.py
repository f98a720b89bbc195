"""Worker stdout and stderr reach the driver, prefixed as Ray prints them: `(function pid=N)`
for tasks and `(ClassName pid=N)` for actors; `init(log_to_driver=False)` turns it off."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import threading
import time

DRIVER = textwrap.dedent("""
    import os, sys
    import zmesh

    zmesh.init(num_cpus=1, log_to_driver=sys.argv[1] == "on")

    @zmesh.remote
    def shout(word):
        print("task says", word)
        print("task complains", word, file=sys.stderr)
        return os.getpid()

    @zmesh.remote
    class Speaker:
        def say(self, word):
            print("actor says", word, flush=True)
            return os.getpid()

    task_pid = zmesh.get(shout.remote("hello"))
    speaker = Speaker.remote()
    actor_pid = zmesh.get(speaker.say.remote("hi"))
    # one write: print() writes the text and the newline apart, and a worker's line
    # forwarded by the loop thread could land between them
    sys.stdout.write(f"PIDS {task_pid} {actor_pid}\\n")
    sys.stdout.flush()
    sys.stdin.read()  # stay up until the test has read what it expects
    zmesh.shutdown()
""")


class Driver:
    """A driver script in a subprocess whose stdout and stderr are read as they come."""

    def __init__(self, log_to_driver: bool) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", DRIVER, "on" if log_to_driver else "off"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: dict[str, list[str]] = {"stdout": [], "stderr": []}
        self.cond = threading.Condition()
        self.closed = 0
        for name in self.lines:
            threading.Thread(target=self._read, args=(name,), daemon=True).start()

    def _read(self, name: str) -> None:
        for line in getattr(self.proc, name):
            with self.cond:
                self.lines[name].append(line)
                self.cond.notify_all()
        with self.cond:
            self.closed += 1
            self.cond.notify_all()

    def wait_for(self, stream: str, pattern: str, timeout: float = 10.0) -> re.Match[str] | None:
        """The first line of `stream` matching `pattern`, waiting up to `timeout` for it."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for line in self.lines[stream]:
                    found = re.search(pattern, line)
                    if found:
                        return found
                left = deadline - time.monotonic()
                if left <= 0 or self.closed == len(self.lines):
                    return None
                self.cond.wait(left)

    def finish(self) -> str:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        assert self.proc.wait(30) == 0, "".join(self.lines["stderr"])
        return "".join(self.lines["stdout"]) + "".join(self.lines["stderr"])


def test_task_and_actor_output_reaches_the_driver_with_rays_prefixes():
    d = Driver(True)
    try:
        pids = d.wait_for("stdout", r"^PIDS (\d+) (\d+)$", timeout=30)
        assert pids, d.lines
        task_pid, actor_pid = pids[1], pids[2]
        assert d.wait_for("stdout", rf"^\(shout pid={task_pid}\) task says hello$"), d.lines
        assert d.wait_for("stderr", rf"^\(shout pid={task_pid}\) task complains hello$"), d.lines
        assert d.wait_for("stdout", rf"^\(Speaker pid={actor_pid}\) actor says hi$"), d.lines
        d.finish()
    finally:
        d.proc.kill()
        d.proc.wait()


def test_log_to_driver_false_keeps_worker_output_away_from_the_driver():
    d = Driver(False)
    try:
        assert d.wait_for("stdout", r"^PIDS ", timeout=30), d.lines
        # nothing can signal that a line will never come: watch for as long as the lines
        # above take to arrive when forwarding is on (well under a second here)
        assert d.wait_for("stdout", "says", timeout=1.0) is None
        output = d.finish()
        for text in ("task says", "task complains", "actor says"):
            assert text not in output
    finally:
        d.proc.kill()
        d.proc.wait()
