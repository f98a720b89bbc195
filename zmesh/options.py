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
        unknown = set(env) - {"env_vars"}
        if unknown:
            raise ValueError(f"runtime_env supports only 'env_vars' here, got {sorted(unknown)}")
        for k, v in (env.get("env_vars") or {}).items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise TypeError(f"runtime_env env_vars must map str to str, got {k!r}: {v!r}")
    return opts


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
    env.update((opts.get("runtime_env") or {}).get("env_vars") or {})
    return env
