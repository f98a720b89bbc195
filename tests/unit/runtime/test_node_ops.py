"""A node's record of the task spans its workers ship (runtime/node/ops.py): the timeline
in order, with each worker's pid, and the finished/failed counters by kind and name."""

from __future__ import annotations

from pathlib import Path

from zmesh.protocol.messages.ops import TaskEvent, TaskEvents
from zmesh.runtime.node import ops
from zmesh.runtime.node.ops import NodeOps


def _ev(i: int, name: str, ok: bool = True, kind: str = "task") -> TaskEvent:
    return TaskEvent(b"t%d" % i, name, kind, float(i), i + 0.5, ok, "" if ok else "boom")


def test_spans_are_kept_in_order_and_counted(tmp_path: Path) -> None:
    node = NodeOps(str(tmp_path), "n1", lambda sender: 0)
    first = [_ev(0, "f"), _ev(1, "f", ok=False), _ev(2, "g", kind="actor_call")]
    node.on_task_events("w1", TaskEvents(pid=11, events=first), [])
    node.on_task_events("w2", TaskEvents(pid=12, events=[_ev(3, "f")]), [])
    assert [(pid, ev.task_id) for pid, ev in node.timeline] == [
        (11, b"t0"), (11, b"t1"), (11, b"t2"), (12, b"t3")]
    assert node.finished == {("task", "f"): 2, ("actor_call", "g"): 1}
    assert node.failed == {("task", "f"): 1}


def test_counters_keep_a_bounded_number_of_names(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(ops, "MAX_NAMES", 2)
    node = NodeOps(str(tmp_path), "n1", lambda sender: 0)
    node.on_task_events("w", TaskEvents(pid=1, events=[_ev(i, f"f{i % 3}") for i in range(9)]), [])
    assert len(node.finished) == 2 and sum(node.finished.values()) == 6
    assert len(node.timeline) == 9
