"""What a node keeps for operators: worker logs on disk, recent task spans, object listings.

`zmesh logs`, `zmesh timeline` and `zmesh memory` query these through the node's `Query`
message (so they reach only authenticated peers, like every other query). Everything kept
is bounded: each worker's log is rotated at `LOG_MAX_BYTES` (one old file kept), and the
timeline holds the last `TIMELINE_MAX` spans.
"""

from __future__ import annotations

import os
import time
from collections import Counter, deque
from collections.abc import Callable
from itertools import repeat
from operator import attrgetter
from typing import Any

import msgspec

from zmesh.protocol.messages.ops import TaskEvent, TaskEvents, UserMetrics

#: one worker's log file is rotated past this size; the previous one is kept as `.1`
LOG_MAX_BYTES = 4 << 20
#: task spans a node remembers for `zmesh timeline`
TIMELINE_MAX = 20_000
#: lines one `logs` answer carries at most (a follower asks again from the new offset)
LOG_ANSWER_LINES = 5_000

#: the queries this module answers
QUERIES = frozenset({"timeline", "timeline_by_node", "tasks_by_node", "logs"})
#: most distinct names a counter keeps (a program making names on the fly stays bounded)
MAX_NAMES = 1_000


class NodeOps:
    """Per-worker log files under `<session>/logs/`, the timeline ring, and their queries."""

    def __init__(self, session_dir: str, node_id: str,
                 pid_of: Callable[[str], int]) -> None:
        self.node_id = node_id
        self.log_dir = os.path.join(session_dir, "logs")
        os.makedirs(self.log_dir, mode=0o700, exist_ok=True)
        self._pid_of = pid_of
        self.timeline: deque[tuple[int, TaskEvent]] = deque(maxlen=TIMELINE_MAX)
        # counters for /metrics: plain ints bumped where the node already handles the event
        self.submitted: dict[str, int] = {}
        self.finished: dict[tuple[str, str], int] = {}  # (kind, name) -> count
        self.failed: dict[tuple[str, str], int] = {}
        self.membership_events: dict[str, int] = {}
        self.user_metrics: dict[int, bytes] = {}  # worker pid -> its latest records
        self.running: dict[int, list[TaskEvent]] = {}  # worker pid -> what it last said runs

    # -- what workers send -------------------------------------------------------------------
    def on_task_events(self, sender: str, msg: TaskEvents, bufs: list[Any]) -> None:
        # every task a worker runs comes through here: the loops are C's (zip, map, Counter)
        events = msg.events
        if msg.running:
            if msg.pid in self.running or len(self.running) < MAX_NAMES:
                self.running[msg.pid] = msg.running
        else:
            self.running.pop(msg.pid, None)
        self.timeline.extend(zip(repeat(msg.pid), events))
        for (ok, kind, name), n in Counter(map(_OUTCOME, events)).items():
            _bump(self.finished if ok else self.failed, (kind, name), n)

    def worker_gone(self, pid: int) -> None:
        """A worker exited: it runs nothing any more."""
        self.running.pop(pid, None)

    def on_user_metrics(self, sender: str, msg: UserMetrics, bufs: list[Any]) -> None:
        if msg.pid in self.user_metrics or len(self.user_metrics) < MAX_NAMES:
            self.user_metrics[msg.pid] = msg.records

    def count_submitted(self, name: str) -> None:
        _bump(self.submitted, name)

    def count_membership(self, kind: str) -> None:
        _bump(self.membership_events, kind)

    def metrics(self, live_pids: set[int]) -> dict[str, Any]:
        """The counters, and user metrics of live workers (a dead worker's are dropped)."""
        for pid in [p for p in self.user_metrics if p not in live_pids]:
            del self.user_metrics[pid]
        return {"submitted": self.submitted,
                "finished": [[k, n, c] for (k, n), c in self.finished.items()],
                "failed": [[k, n, c] for (k, n), c in self.failed.items()],
                "membership_events": self.membership_events,
                "user": {str(pid): msgspec.msgpack.decode(rec)
                         for pid, rec in self.user_metrics.items() if rec}}

    def keep_log(self, sender: str, prefix: str, lines: list[str], stderr: bool) -> None:
        """Append a worker's lines to its file, stamped, rotating it past LOG_MAX_BYTES."""
        pid = self._pid_of(sender)
        if not pid or not lines:
            return
        path = self._log_path(pid)
        stamp = time.strftime("%H:%M:%S", time.localtime())
        stream = "err" if stderr else "out"
        text = "".join(f"{time.time():.3f} {stamp} {stream} {prefix} {ln}\n" for ln in lines)
        try:
            if os.path.exists(path) and os.path.getsize(path) > LOG_MAX_BYTES:
                os.replace(path, path + ".1")
            with open(path, "a", encoding="utf-8") as f:
                f.write(text)
        except OSError:
            pass  # a full disk must not stop the node; the driver still gets the lines

    def _log_path(self, pid: int) -> str:
        return os.path.join(self.log_dir, f"worker-{pid}.log")

    # -- queries -----------------------------------------------------------------------------
    def answer(self, what: str, arg: bytes, actor_pid: Callable[[str], int]) -> Any:
        if what == "timeline":
            return [{"pid": pid, "task_id": ev.task_id.hex(), "name": ev.name, "kind": ev.kind,
                     "start": ev.start, "end": ev.end, "ok": ev.ok, "error": ev.error,
                     "node_id": self.node_id}
                    for pid, ev in self.timeline]
        if what == "timeline_by_node":  # this node's part of the mesh-wide `timeline_mesh`
            return {self.node_id: self.answer("timeline", arg, actor_pid)}
        if what == "tasks_by_node":  # this node's part of `tasks_mesh`: ended and running
            return {self.node_id: {
                "done": self.answer("timeline", arg, actor_pid),
                "running": [{"pid": pid, "task_id": ev.task_id.hex(), "name": ev.name,
                             "kind": ev.kind, "start": ev.start}
                            for pid, running in self.running.items() for ev in running]}}
        if what == "logs":
            return self._logs(msgspec.msgpack.decode(arg) if arg else {}, actor_pid)
        raise KeyError(f"unknown query {what!r}")

    def _logs(self, sel: dict[str, Any], actor_pid: Callable[[str], int]) -> dict[str, Any]:
        """Lines of the selected workers' logs after the given byte offsets.

        sel: {"actor": name} | {"task": hex id} | {"pid": n} | {} (every worker here),
        plus "offsets": {file name: byte offset} from the previous answer (to follow)."""
        pids: list[int] | None = None
        window: tuple[float, float] | None = None
        if sel.get("actor"):
            pid = actor_pid(str(sel["actor"]))
            pids = [pid] if pid else []
        elif sel.get("task"):
            spans = [(p, ev) for p, ev in self.timeline if ev.task_id.hex() == sel["task"]]
            pids = [p for p, _ in spans]
            if spans:
                window = (spans[0][1].start - 0.001, spans[0][1].end + 0.5)
        elif sel.get("pid"):
            pids = [int(sel["pid"])]
        offsets: dict[str, int] = dict(sel.get("offsets") or {})
        files: dict[str, Any] = {}
        for name in sorted(os.listdir(self.log_dir)):
            if not (name.startswith("worker-") and name.endswith(".log")):
                continue
            pid = int(name[len("worker-"):-len(".log")])
            if pids is not None and pid not in pids:
                continue
            lines, end = _read_from(os.path.join(self.log_dir, name), offsets.get(name, 0))
            if window is not None:
                lines = [ln for ln in lines if _in_window(ln, window)]
            files[name] = {"pid": pid, "offset": end, "lines": [_strip_time(ln) for ln in lines]}
        return {"node_id": self.node_id, "files": files, "found": pids != []}


def _read_from(path: str, offset: int) -> tuple[list[str], int]:
    try:
        with open(path, "rb") as f:
            if offset > os.fstat(f.fileno()).st_size:
                offset = 0  # rotated since: start over in the new file
            f.seek(offset)
            data = f.read()
    except OSError:
        return [], offset
    complete = data[:data.rfind(b"\n") + 1]
    lines = complete.decode("utf-8", "replace").splitlines()[-LOG_ANSWER_LINES:]
    return lines, offset + len(complete)


def _in_window(line: str, window: tuple[float, float]) -> bool:
    try:
        t = float(line.split(" ", 1)[0])
    except ValueError:
        return False
    return window[0] <= t <= window[1]


def _strip_time(line: str) -> str:
    return line.split(" ", 1)[1] if " " in line else line


def _bump(counts: dict[Any, int], key: Any, n: int = 1) -> None:
    if key in counts or len(counts) < MAX_NAMES:
        counts[key] = counts.get(key, 0) + n


_OUTCOME = attrgetter("ok", "kind", "name")
