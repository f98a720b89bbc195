"""The actor lifecycle core under random events (hypothesis): restarts never pass
max_restarts, a kill with no_restart is final, death is final, what ran here is released once
per death, and validate() holds after every step; a failure prints the actor's story."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from zmesh.core import actor_lifecycle as life

events = st.one_of(
    st.builds(life.Started, st.sampled_from(["ipc://a", "ipc://b"])),
    st.builds(life.InitFailed, st.just("__init__ raised"), st.just(b"err")),
    st.builds(life.Lost, st.just("its worker died"), st.booleans(), st.booleans()),
    st.builds(life.KillRequested, st.just("killed"), st.booleans(), st.booleans()),
    st.builds(life.Unschedulable, st.just("infeasible")),
)


@settings(max_examples=400, deadline=None)
@given(st.integers(-1, 3), st.lists(events, max_size=40))
def test_restarts_kills_and_death_follow_rays_rules(max_restarts, steps):
    actor = life.ActorLifecycle(max_restarts)
    final = False  # killed with no_restart, or dead
    try:
        for event in steps:
            was_dead = actor.state is life.ActorState.DEAD
            actions = actor.handle(event)
            actor.validate()
            if was_dead:
                assert actions == []
                continue
            kinds = [type(a) for a in actions]
            if isinstance(event, life.KillRequested) and event.no_restart:
                final = True
                assert life.FreeName in kinds
            if final:
                assert life.Schedule not in kinds
            if isinstance(event, life.Lost):
                assert kinds.count(life.Release) == (1 if event.here else 0)
                restarted = life.Schedule in kinds
                assert restarted == (actor.state is life.ActorState.RESTARTING)
                if event.stopping:
                    assert not restarted
            if isinstance(event, (life.InitFailed, life.Unschedulable)):
                assert actor.state is life.ActorState.DEAD
            if isinstance(event, life.KillRequested) and not event.reachable:
                assert actor.state is life.ActorState.DEAD and life.Cancel in kinds
            if actor.state is life.ActorState.DEAD:
                final = True
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nstory:\n" + "\n".join(actor.story())) from None


def test_an_actor_restarts_up_to_max_restarts_then_dies_naming_why():
    actor = life.ActorLifecycle(max_restarts=2)
    actor.handle(life.Started("ipc://w1"))
    for n in (1, 2):
        actions = actor.handle(life.Lost("its worker was killed by signal 9", here=True))
        assert isinstance(actions[0], life.Release) and isinstance(actions[-1], life.Schedule)
        assert actor.state is life.ActorState.RESTARTING and actor.restarts == n
        actor.handle(life.Started(f"ipc://w{n + 1}"))
    (release, dead) = actor.handle(life.Lost("its worker was killed by signal 9", here=True))
    assert isinstance(release, life.Release)
    assert dead == life.Publish(life.ActorState.DEAD, "", "its worker was killed by signal 9",
                                b"", 2)


def test_a_kill_names_the_death_that_follows_and_allows_a_restart_without_no_restart():
    actor = life.ActorLifecycle(max_restarts=1)
    actor.handle(life.Started("ipc://w1"))
    assert actor.handle(life.KillRequested("it was killed by zmesh.kill()", False, True)) == [
        life.StopWorker(no_restart=False, reason="it was killed by zmesh.kill()")]
    actions = actor.handle(life.Lost("killed by signal 9", here=True))
    assert actions[1] == life.Publish(life.ActorState.RESTARTING, "",
                                      "it was killed by zmesh.kill()", b"", 1)


def test_a_host_report_is_passed_on_as_it_is():
    actor = life.ActorLifecycle(max_restarts=3)
    (pub,) = actor.handle(life.HostReported(life.ActorState.ALIVE, "tcp://h:1", "", 2, b""))
    assert pub == life.Publish(life.ActorState.ALIVE, "tcp://h:1", "", b"", 2)
    actor.validate()
