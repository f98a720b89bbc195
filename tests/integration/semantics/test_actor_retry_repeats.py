"""A call sent again by `retry_exceptions` and then repeated by the caller's resend sweep is
not answered with the exception of its first attempt.

An actor keeps its latest answers by call id, to answer a repeat of a call whose answer was
lost (`worker/recent_tasks.CallReplies`). A call that `retry_exceptions` sends again keeps its
id, so while the second attempt ran, a repeat of it (the caller's sweep sends one for every
call unanswered for `RESEND_AFTER_S`: any call that runs longer) found the first attempt's
kept exception and sent it back; the caller took it for the second attempt's answer and the
call failed (or, with retries left, ran a third time beside the second)."""

from __future__ import annotations

from typing import Any

from runtime_fixtures import wait_until

from zmesh.protocol.messages import runtime as m
from zmesh.runtime import context
from zmesh.runtime.owner import call_resends


class _CountingLoop:
    """The caller's loop as the resend sweep sees it, counting the calls it sends again."""

    def __init__(self, loop: Any) -> None:
        self._loop = loop
        self.resent: list[bytes] = []

    def send(self, address: str, msg: Any) -> None:
        if isinstance(msg, m.ActorCall):
            self.resent.append(msg.task_id)
        self._loop.send(address, msg)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loop, name)


def test_a_retried_call_that_runs_long_is_not_answered_with_its_first_exception(
        ray: Any, monkeypatch: Any) -> None:
    monkeypatch.setattr(call_resends, "RESEND_AFTER_S", 0.2)  # (3 s by default)
    monkeypatch.setattr(call_resends, "SWEEP_S", 0.1)
    resends = context.current_client().actors.resends
    counting = _CountingLoop(resends._loop)
    monkeypatch.setattr(resends, "_loop", counting)

    @ray.remote(max_concurrency=2)
    class Flaky:
        def __init__(self) -> None:
            import threading

            self.attempts = 0
            self.go = threading.Event()

        @ray.method(max_task_retries=1, retry_exceptions=True)
        def work(self) -> int:
            self.attempts += 1
            if self.attempts == 1:
                raise ValueError("the first attempt fails")
            assert self.go.wait(120), "the test never let the second attempt finish"
            return self.attempts

        def attempts_made(self) -> int:
            return self.attempts

        def release(self) -> None:
            self.go.set()

    actor = Flaky.remote()
    ref = actor.work.remote()
    task_id = ref.id[:-4]
    try:
        assert wait_until(lambda: ray.get(actor.attempts_made.remote(), timeout=60) == 2, 60)
        before = counting.resent.count(task_id)
        # the sweep repeats the second attempt (it runs longer than RESEND_AFTER_S) ...
        assert wait_until(lambda: counting.resent.count(task_id) > before, 60)
        # ... and the actor must not answer that repeat with the first attempt's exception
        ready, _ = ray.wait([ref], timeout=5)
        assert ready == [], "the repeat of the second attempt got the first one's exception"
    finally:
        ray.get(actor.release.remote(), timeout=60)
    assert ray.get(ref, timeout=60) == 2
    assert ray.get(actor.attempts_made.remote(), timeout=60) == 2
    ray.kill(actor)
