"""A task whose result is overdue is sent again, ever more rarely, and only while the core
still has it out on the same lease and attempt (owner/resend.py); a worker runs a task once
per attempt and answers a repeat from the result it kept (worker/recent_tasks.py)."""

from __future__ import annotations

from zmesh.core.task_owner import Send
from zmesh.protocol.messages import runtime as m
from zmesh.runtime.owner.resend import RESEND_AFTER_S, Resends
from zmesh.runtime.worker.recent_tasks import RecentTasks


def test_an_overdue_task_is_sent_again_with_backoff_until_answered() -> None:
    r = Resends()
    send = Send(b"t", b"lease", "worker", 0)
    r.sent(send, now=100.0)

    def placed(tid: bytes) -> tuple[bytes, int] | None:
        return (b"lease", 0)

    assert r.due(100.0 + RESEND_AFTER_S * 0.99, placed) == []
    assert r.due(100.0 + RESEND_AFTER_S, placed) == [send]
    t = 100.0 + RESEND_AFTER_S
    assert r.due(t + 2 * RESEND_AFTER_S * 0.99, placed) == []  # then twice the wait
    assert r.due(t + 2 * RESEND_AFTER_S, placed) == [send]
    r.answered(b"t")
    assert r.due(t + 100 * RESEND_AFTER_S, placed) == [] and len(r) == 0


def test_a_task_that_moved_or_ended_is_forgotten() -> None:
    r = Resends()
    r.sent(Send(b"a", b"l1", "w", 0), now=0.0)
    r.sent(Send(b"b", b"l1", "w", 0), now=0.0)
    r.sent(Send(b"c", b"l1", "w", 0), now=0.0)
    where = {b"a": (b"l2", 0), b"b": (b"l1", 1)}  # a moved lease, b retried, c ended
    assert r.due(1e9, where.get) == [] and len(r) == 0


def _task(tid: bytes, attempt: int = 0) -> m.ExecuteTask:
    return m.ExecuteTask(task_id=tid, owner="ipc:///o", fn_id=b"f", name="f",
                         args=m.Args(data=b"", refs=[]), num_returns=1, attempt=attempt)


def test_a_worker_runs_a_task_once_per_attempt_and_answers_a_repeat() -> None:
    recent = RecentTasks(keep=3)
    assert recent.take(_task(b"t")) == (True, None)  # new: run it
    assert recent.take(_task(b"t")) == (False, None)  # still running: its result will go
    result = m.TaskResult(task_id=b"t", returns=[])
    recent.finished(b"t", 0, result)
    assert recent.take(_task(b"t")) == (False, result)  # ran: send the result again
    assert recent.take(_task(b"t", attempt=1)) == (True, None)  # a retry is a new run
    for tid in (b"x", b"y", b"z"):
        recent.take(_task(tid))
    assert recent.take(_task(b"t")) == (True, None)  # forgotten (bounded): runs again


def test_trimming_keeps_a_task_still_running_and_forgets_the_oldest_finished() -> None:
    recent = RecentTasks(keep=4)  # trimmed past 4 + 4 // 16 = 4 entries
    recent.take(_task(b"slow"))  # the oldest: still running while the others finish
    for tid in (b"a", b"b", b"c", b"d", b"e"):
        recent.take(_task(tid))
        recent.finished(tid, 0, m.TaskResult(task_id=tid, returns=[]))
    assert recent.take(_task(b"slow")) == (False, None)  # kept: a repeat must not run it
    assert recent.take(_task(b"a"))[0] and recent.take(_task(b"b"))[0]  # forgotten first
    recent.finished(b"slow", 0, m.TaskResult(task_id=b"slow", returns=[]))
    assert recent.take(_task(b"slow"))[1] is not None  # its result answers a repeat


def test_kept_answers_are_bounded_in_bytes() -> None:
    from zmesh.runtime.worker import recent_tasks
    from zmesh.runtime.worker.recent_tasks import CallReplies

    big = m.Value(data=b"x" * (recent_tasks.KEEP_BYTES // 4))
    replies = CallReplies()
    for i in range(10):
        replies.put(m.TaskResult(task_id=bytes([i]), returns=[big]))
    kept = [i for i in range(10) if replies.get(bytes([i])) is not None]
    assert kept == [7, 8, 9]  # the newest that fit in the budget
    recent = RecentTasks()
    for i in range(10):
        recent.take(_task(bytes([i])))
        recent.finished(bytes([i]), 0, m.TaskResult(task_id=bytes([i]), returns=[big]))
    assert [i for i in range(10) if recent.take(_task(bytes([i])))[1] is not None] == [7, 8, 9]


def test_a_repeat_tells_a_running_call_from_an_answered_and_forgotten_one() -> None:
    from zmesh.runtime.worker.recent_tasks import CallReplies

    replies = CallReplies(keep=2)
    replies.expect(b"a")
    assert replies.repeat(b"a") == (None, False)  # still running: its answer will come
    answer = m.TaskResult(task_id=b"a", returns=[])
    replies.put(answer)
    assert replies.repeat(b"a") == (answer, False)  # answered: send it again
    for tid in (b"b", b"c"):
        replies.expect(tid)
        replies.put(m.TaskResult(task_id=tid, returns=[]))
    assert replies.repeat(b"a") == (None, True)  # answered and forgotten: it never comes


def test_a_long_queue_of_tasks_is_kept_whole_and_trimmed_as_they_finish() -> None:
    """A chain queues thousands of tasks at one worker at once: none may be forgotten while
    queued, and the finished ones go as the bound is passed, oldest first."""
    recent = RecentTasks(keep=8)
    ids = [b"t%03d" % i for i in range(100)]
    for tid in ids:
        assert recent.take(_task(tid)) == (True, None)
    assert all(recent.take(_task(tid)) == (False, None) for tid in ids)  # all still queued
    results = {tid: m.TaskResult(task_id=tid, returns=[]) for tid in ids}
    for tid in ids[:95]:
        recent.finished(tid, 0, results[tid])
    assert recent.take(_task(ids[0]))[0]  # the oldest finished went (and runs again)
    assert recent.take(_task(ids[94])) == (False, results[ids[94]])  # the newest is kept
    assert all(recent.take(_task(tid)) == (False, None) for tid in ids[95:])  # still queued
    assert len(recent._tasks) <= 8 + 8 // 16 + 1


def test_a_repeat_finds_its_answer_among_the_kept_ones_the_newest_if_answered_twice() -> None:
    from zmesh.runtime.worker.recent_tasks import CallReplies

    replies = CallReplies(keep=8)
    for i in range(20):
        tid = bytes([i])
        replies.expect(tid)
        replies.put(m.TaskResult(task_id=tid, returns=[m.Value(data=bytes([i]))]))
    assert [i for i in range(20) if replies.get(bytes([i])) is not None] == list(range(12, 20))
    assert replies.repeat(bytes([3])) == (None, True)  # answered, then forgotten
    again = m.TaskResult(task_id=bytes([15]), returns=[m.Value(data=b"again")])
    replies.put(again)  # answered again (an error for a repeat whose answer was forgotten)
    assert replies.repeat(bytes([15])) == (again, False)
    assert replies.get(bytes([12])) is None  # the oldest made room for it
