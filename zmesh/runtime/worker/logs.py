"""Worker output to the driver: fds 1 and 2 go into pipes; lines travel prefixed as in Ray.

A line printed while a task runs is shown by the driver as `(square pid=123) text`.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable

_prefix = f"(worker pid={os.getpid()})"


def set_prefix(prefix: str) -> None:
    """The prefix for lines printed from now on (the running task or actor)."""
    global _prefix
    _prefix = prefix


def capture_output(send: Callable[[str, list[str], bool], None]) -> None:
    """Redirect fds 1 and 2 into pipes read by threads that call send(prefix, lines, stderr)."""
    for fd, is_err in ((1, False), (2, True)):
        r, w = os.pipe()
        os.dup2(w, fd)
        os.close(w)
        threading.Thread(target=_pump, args=(r, is_err, send), daemon=True,
                         name=f"zmesh-log-{fd}").start()
    sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
    sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)


def _pump(fd: int, is_err: bool, send: Callable[[str, list[str], bool], None]) -> None:
    pending = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            return
        if not chunk:
            return
        pending += chunk
        if b"\n" not in pending:
            continue
        *lines, pending = pending.split(b"\n")
        send(_prefix, [ln.decode("utf-8", "replace") for ln in lines], is_err)
