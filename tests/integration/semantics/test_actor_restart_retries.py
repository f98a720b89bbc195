"""Pending calls to an async actor are retried after a restart within max_task_retries."""

from __future__ import annotations

import asyncio
import os

from runtime_fixtures import wait_until


def test_pending_async_actor_calls_are_retried_after_a_restart(ray, tmp_path):
    # docs (Actor fault tolerance: with max_restarts and max_task_retries, tasks that were
    # in flight when the actor died are retried on the restarted actor); observed Ray
    # behaviour: the same holds for async actors.
    marker = tmp_path / "first-life"

    @ray.remote(max_restarts=1, max_task_retries=2)
    class Async:
        async def slow(self, i, path):
            if not os.path.exists(path):  # first life: hold the calls until the kill
                with open(path + ".tmp", "w") as f:
                    f.write(str(os.getpid()))
                os.replace(path + ".tmp", path)  # the pid is there once the file is
                await asyncio.sleep(120)
            return i

    a = Async.remote()
    refs = [a.slow.remote(i, str(marker)) for i in range(4)]
    assert wait_until(marker.exists, timeout=30)
    os.kill(int(marker.read_text()), 9)
    assert ray.get(refs, timeout=60) == [0, 1, 2, 3]
