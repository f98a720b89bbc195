"""Options of `@remote` and `.options()`: validated once, with errors naming the bad key."""

from __future__ import annotations

from typing import Any

TASK_OPTIONS = {
    "num_cpus", "num_gpus", "resources", "memory", "num_returns", "max_retries",
    "retry_exceptions", "scheduling_strategy", "runtime_env", "name", "max_calls",
    "accelerator_type", "label_selector", "_metadata", "serializer",
    "_generator_backpressure_num_objects",
}
ACTOR_OPTIONS = {
    "num_cpus", "num_gpus", "resources", "memory", "max_restarts", "max_task_retries",
    "max_concurrency", "name", "namespace", "lifetime", "scheduling_strategy", "runtime_env",
    "get_if_exists", "accelerator_type", "label_selector", "_metadata", "max_pending_calls",
    "concurrency_groups",
}


def check_options(opts: dict[str, Any], allowed: set[str], what: str) -> dict[str, Any]:
    """Reject unknown option names with a did-you-mean; return the options."""
    import difflib

    for key in opts:
        if key not in allowed:
            close = difflib.get_close_matches(key, sorted(allowed), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"invalid option {key!r} for {what}{hint}")
    for key in ("num_cpus", "num_gpus", "memory"):
        v = opts.get(key)
        if v is not None and (not isinstance(v, int | float) or v < 0):
            raise ValueError(f"{key} must be a number >= 0, got {v!r}")
    env = opts.get("runtime_env")
    if env is not None:
        if not isinstance(env, dict):
            raise TypeError(f"runtime_env must be a dict, got {type(env).__name__}")
        from zmesh import runtime_env

        runtime_env.check(env)
        for k, v in (env.get("env_vars") or {}).items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise TypeError(f"runtime_env env_vars must map str to str, got {k!r}: {v!r}")
    return opts


TASK_DEFAULT_CPUS = 1.0
"""Ray's default for a task that names no num_cpus; applied here and nowhere else (the node
takes an empty request as zero-CPU work)."""
ACTOR_DEFAULT_PLACEMENT = {"CPU": 1.0}
"""Ray's default for an actor that names no resources at all: 1 CPU to be placed, 0 held
while it runs. An actor naming any resource (even num_cpus=0) is placed by what it names."""


def task_resources(opts: dict[str, Any]) -> dict[str, float]:
    """What a task asks for, with Ray's 1-CPU default; {} for num_cpus=0 and nothing else."""
    return resources_of(opts, default_cpus=TASK_DEFAULT_CPUS)


def actor_resources(opts: dict[str, Any]) -> tuple[dict[str, float], dict[str, float]]:
    """(held while running, needed to be placed) for an actor, with Ray's defaults."""
    held = resources_of(opts, default_cpus=0.0)
    named = any(opts.get(k) is not None for k in ("num_cpus", "num_gpus", "resources", "memory"))
    return held, (dict(held) if named else dict(ACTOR_DEFAULT_PLACEMENT))


def omp_env(env: dict[str, str], resources: dict[str, float]) -> dict[str, str]:
    """Ray sets OMP_NUM_THREADS to the CPUs a task or actor holds (at least 1), unless the
    user's runtime_env sets it."""
    if "OMP_NUM_THREADS" in env:
        return env
    return {**env, "OMP_NUM_THREADS": str(max(1, int(resources.get("CPU", 0.0))))}


def max_calls_of(opts: dict[str, Any], resources: dict[str, float]) -> int:
    """Ray's `max_calls`: a worker exits after that many calls of the function; 0 means no
    limit, the default for CPU tasks; GPU tasks default to 1 (to free GPU memory), as in Ray."""
    value = opts.get("max_calls")
    if value is None:
        return 1 if resources.get("GPU") else 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"max_calls must be an int >= 0, got {value!r}")
    return value


def resources_of(opts: dict[str, Any], *, default_cpus: float) -> dict[str, float]:
    """The resource request of a task or actor: CPU, GPU, memory and custom resources."""
    res: dict[str, float] = {}
    cpus = opts.get("num_cpus")
    res["CPU"] = float(default_cpus if cpus is None else cpus)
    if opts.get("num_gpus"):
        res["GPU"] = float(opts["num_gpus"])
    if opts.get("memory"):
        res["memory"] = float(opts["memory"])
    for k, v in (opts.get("resources") or {}).items():
        if k in ("CPU", "GPU"):
            raise ValueError(f"use num_cpus/num_gpus, not resources={{{k!r}: ...}}")
        res[k] = float(v)
    return {k: v for k, v in res.items() if v}


def labels_of(opts: dict[str, Any]) -> dict[str, str]:
    """`label_selector`: node labels that must match exactly (Ray's operators are not
    supported yet, and refused rather than misread)."""
    selector = opts.get("label_selector") or {}
    if not isinstance(selector, dict):
        raise TypeError(f"label_selector must be a dict of str to str, got {selector!r}")
    for k, v in selector.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise TypeError(f"label_selector must map str to str, got {k!r}: {v!r}")
        if v.startswith("!") or v.startswith("in(") or v.startswith("!in("):
            raise ValueError(f"label_selector {k!r}: {v!r}: only exact values are supported")
    return dict(selector)


def env_vars_of(opts: dict[str, Any], base: dict[str, str]) -> dict[str, str]:
    env = dict(base)
    renv = opts.get("runtime_env") or {}
    env.update(renv.get("env_vars") or {})
    if renv.get("working_dir") or renv.get("py_modules"):
        from zmesh import runtime_env
        from zmesh.runtime import context

        env.update(runtime_env.env_vars(context.current_client(), renv))
    return env


def validate_namespace(namespace: object) -> None:
    """Ray's rule: a namespace is None or a non-empty str (TypeError / ValueError)."""
    if not isinstance(namespace, str):
        raise TypeError(f"namespace must be None or a str, got {namespace!r}")
    if not namespace:
        raise ValueError('"" is not a valid namespace; pass None for the default namespace')
