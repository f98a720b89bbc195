"""`runtime_env={"env_vars": ...}` given to init, to a task or to an actor reaches user code;
the more specific one wins, and it does not leak into work that did not ask for it."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

import zmesh


@pytest.fixture(scope="module")
def ray() -> Iterator[object]:
    zmesh.init(num_cpus=2, runtime_env={"env_vars": {"JOB_LEVEL": "from-init",
                                                     "OVERRIDDEN": "init"}})
    yield zmesh
    zmesh.shutdown()


def test_init_env_vars_reach_every_task(ray):
    @ray.remote
    def env():
        return {n: os.environ.get(n) for n in ("JOB_LEVEL", "OVERRIDDEN")}

    assert ray.get(env.remote()) == {"JOB_LEVEL": "from-init", "OVERRIDDEN": "init"}


def test_task_env_vars_add_to_and_override_the_init_ones(ray):
    @ray.remote(runtime_env={"env_vars": {"OVERRIDDEN": "task", "TASK_ONLY": "yes"}})
    def env():
        return {n: os.environ.get(n) for n in ("JOB_LEVEL", "OVERRIDDEN", "TASK_ONLY")}

    @ray.remote
    def plain():
        return {n: os.environ.get(n) for n in ("TASK_ONLY", "OVERRIDDEN")}

    assert ray.get(env.remote()) == {"JOB_LEVEL": "from-init", "OVERRIDDEN": "task",
                                     "TASK_ONLY": "yes"}
    assert ray.get([plain.remote() for _ in range(4)]) == \
        [{"TASK_ONLY": None, "OVERRIDDEN": "init"}] * 4


def test_options_runtime_env_applies_to_one_call(ray):
    @ray.remote
    def env():
        return {n: os.environ.get(n) for n in ("PER_CALL",)}

    assert ray.get(env.options(runtime_env={"env_vars": {"PER_CALL": "1"}}).remote()) == \
        {"PER_CALL": "1"}
    assert ray.get(env.remote()) == {"PER_CALL": None}


def test_actor_env_vars_are_set_for_init_and_every_method(ray):
    @ray.remote(runtime_env={"env_vars": {"ACTOR_VAR": "actor", "OVERRIDDEN": "actor"}})
    class Reader:
        def __init__(self):
            self.at_init = {n: os.environ.get(n) for n in ("ACTOR_VAR",)}

        def env(self):
            names = ("ACTOR_VAR", "JOB_LEVEL", "OVERRIDDEN")
            return self.at_init, {n: os.environ.get(n) for n in names}

    reader = Reader.remote()
    at_init, now = ray.get(reader.env.remote())
    assert at_init == {"ACTOR_VAR": "actor"}
    assert now == {"ACTOR_VAR": "actor", "JOB_LEVEL": "from-init", "OVERRIDDEN": "actor"}
    ray.kill(reader)


def test_the_driver_environment_is_untouched(ray):
    assert os.environ.get("JOB_LEVEL") is None


def test_env_vars_that_are_not_strings_are_refused(ray):
    with pytest.raises(TypeError, match="env_vars must map str to str, got 'A': 1"):
        @ray.remote(runtime_env={"env_vars": {"A": 1}})
        def bad_value():
            return 1

        bad_value.remote()
