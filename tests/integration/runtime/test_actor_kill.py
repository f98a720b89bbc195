"""`kill` from the caller's side: calls made after it fail at once, never reach the old worker."""

from __future__ import annotations

import pytest

from zmesh.exceptions import RayActorError


def test_call_made_right_after_kill_fails_with_actor_error(ray):
    @ray.remote
    class Pinger:
        def ping(self):
            return "pong"

    # repeated: the call races the node's kill of the worker, which used to win sometimes
    for _ in range(5):
        a = Pinger.remote()
        assert ray.get(a.ping.remote(), timeout=30) == "pong"
        ray.kill(a)
        with pytest.raises(RayActorError, match="killed"):
            ray.get(a.ping.remote(), timeout=10)


def test_every_call_to_a_killed_actor_fails_rather_than_hangs(ray):
    @ray.remote
    class Pinger:
        def ping(self):
            return "pong"

    a = Pinger.remote()
    ray.get(a.ping.remote(), timeout=30)
    ray.kill(a)
    refs = [a.ping.remote() for _ in range(20)]
    for ref in refs:
        with pytest.raises(RayActorError):
            ray.get(ref, timeout=10)
