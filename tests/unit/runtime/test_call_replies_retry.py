"""An actor's kept answers and a call that `retry_exceptions` sent again under the same id."""

from __future__ import annotations

from zmesh.protocol.messages import runtime as m
from zmesh.runtime.worker.recent_tasks import CallReplies


def test_a_repeat_of_a_call_running_again_gets_no_answer_of_an_earlier_attempt() -> None:
    replies = CallReplies(keep=8)
    replies.expect(b"a")
    failed = m.TaskResult(task_id=b"a", returns=[m.Value(data=b"err", is_error=True)])
    replies.put(failed)
    assert replies.repeat(b"a") == (failed, False)  # answered: a repeat gets it again
    replies.expect(b"a")  # the caller's retry_exceptions sent it again: it runs now
    assert replies.repeat(b"a") == (None, False)  # its answer will come (was: `failed`)
    done = m.TaskResult(task_id=b"a", returns=[m.Value(data=b"ok")])
    replies.put(done)
    assert replies.repeat(b"a") == (done, False)
