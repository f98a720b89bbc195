"""`@remote` functions: `.remote()` submits a task and returns ObjectRefs at once."""

from __future__ import annotations

import hashlib
import inspect
import sys
import threading
from typing import Any, Generic, TypeVar

import cloudpickle

from zmesh.generators import backpressure_of, returned, wire_num_returns
from zmesh.options import (
    TASK_OPTIONS,
    check_options,
    env_vars_of,
    labels_of,
    max_calls_of,
    omp_env,
    task_resources,
)
from zmesh.runtime import context
from zmesh.runtime.args import pack_args
from zmesh.runtime.owner.task_record import Task
from zmesh.runtime.strategies import encode_strategy

R = TypeVar("R")


class _Exported:
    """A function or class pickled once, by content id."""

    def __init__(self, obj: Any) -> None:
        self._obj = obj
        self._lock = threading.Lock()
        self.blob = b""
        self.fn_id = b""

    def ensure(self) -> None:
        if self.blob:
            return
        with self._lock:
            if not self.blob:
                try:
                    blob = cloudpickle.dumps(self._obj)
                except Exception as exc:
                    from zmesh.errors import SerializationError
                    from zmesh.serializers.unpicklable import describe_unpicklable

                    raise SerializationError(
                        describe_unpicklable(self._obj, cloudpickle.dumps, exc)) from exc
                _check_code_size(self._obj, len(blob))
                self.fn_id = hashlib.sha1(blob).digest()[:16]
                self.blob = blob


CODE_HEADROOM = 64 << 10
"""Room left in a message header for the rest of a task or actor spec beside its code."""


def _check_code_size(obj: Any, size: int) -> None:
    """Code travels inline in task and actor messages: refuse code over the header limit
    with a clear error (a message over it would be dropped by its receiver: a hang)."""
    from zmesh.protocol.limits import default_limits

    limit = default_limits().max_header_bytes - CODE_HEADROOM
    if size > limit:
        name = getattr(obj, "__qualname__", repr(obj))
        raise ValueError(f"{name} pickles to {size} bytes, over the {limit} bytes its task or "
                         "actor messages can carry: it probably captures a large object; "
                         "put() the object and pass the ref instead")


class RemoteFunction(Generic[R]):
    """A function that runs as a task: `f.remote(*args)` returns ObjectRef(s)."""

    def __init__(self, fn: Any, options: dict[str, Any]) -> None:
        if inspect.iscoroutinefunction(fn):  # as Ray 2.60 (remote_function.py)
            raise ValueError(f"'async def' should not be used for remote tasks ({fn.__name__}); "
                             f"wrap the coroutine with asyncio.run(f()), or use an async actor")
        self._function = fn
        self._options = check_options(dict(options), TASK_OPTIONS, f"task {fn.__name__}")
        self._exported = _Exported(fn)
        self.__name__ = getattr(fn, "__name__", "task")
        self.__doc__ = fn.__doc__
        self._cache: tuple[Any, ...] | None = None
        self._check_args = args_checker(fn)

    def __reduce__(self) -> Any:
        return (RemoteFunction, (self._function, self._options))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"remote function {self.__name__} cannot be called directly; "
                        f"use {self.__name__}.remote(...)")

    def options(self, **opts: Any) -> RemoteFunction[R]:
        """A copy of this function with some options changed for the calls made through it."""
        merged = dict(self._options)
        merged.update(check_options(opts, TASK_OPTIONS, f"task {self.__name__}"))
        clone = RemoteFunction.__new__(RemoteFunction)
        clone.__dict__.update(self.__dict__)
        clone._options = merged
        clone._cache = None
        return clone

    def _prepared(self, client: Any) -> tuple[Any, ...]:
        cache = self._cache
        if cache is None or cache[0] is not client:
            opts = self._options
            res = task_resources(opts)
            strategy = encode_strategy(opts.get("scheduling_strategy"))
            labels = labels_of(opts)
            max_calls = max_calls_of(opts, res)
            key = (tuple(sorted(res.items())), strategy, tuple(sorted(labels.items())),
                   max_calls)
            retries = opts.get("max_retries")
            num_returns = wire_num_returns(opts.get("num_returns"), self._function)
            cache = self._cache = (
                client, res, strategy, key, _max_retries(retries),
                _retry_spec(opts.get("retry_exceptions", False)),
                omp_env(env_vars_of(opts, client.default_env), res),
                opts.get("name") or self.__name__, labels, max_calls, num_returns,
                backpressure_of(opts) if num_returns < 0 else 0)
        return cache

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        """Submit the task; returns an ObjectRef (a list of them when num_returns > 1)."""
        check = self._check_args
        if check is not None:
            check(*args, **kwargs)  # a call that cannot bind fails here, as in Ray
        client = context.current_client()
        exported = self._exported
        exported.ensure()
        (_, res, strategy, key, retries, retry_exc, env, name, labels, max_calls, num_returns,
         backpressure) = self._prepared(client)
        if client.inherited_strategy and "scheduling_strategy" not in self._options:
            strategy = client.inherited_strategy  # placement_group_capture_child_tasks
            key = (key[0], strategy, key[2], key[3])  # (resources, strategy, labels, max_calls)
        data, top, nested = pack_args(args, kwargs)
        task_id = client.ids.task_id()
        task = Task(task_id, exported.fn_id, exported.blob, name, data, top,
                    [r.id for r in nested], num_returns, key, res, strategy, retries,
                    retry_exc, env, labels=labels, backpressure=backpressure,
                    max_calls=max_calls)
        refs = client.make_refs(task_id, num_returns)
        if num_returns == 1:
            client.tasks.submit(task)
            return refs[0]
        out = returned(client, num_returns, refs, task_id, backpressure)
        client.tasks.submit(task)
        return out


def args_checker(target: Any) -> Any:
    """`Signature.bind` of a function or class (its constructor): raises TypeError for
    arguments that do not fit; None when the signature cannot be read. For a signature of
    plain positional parameters, a call by position within their count is accepted without
    binding (the common case, checked on every `.remote()`)."""
    try:
        sig = inspect.signature(target)
    except (TypeError, ValueError):
        return None
    bind = sig.bind
    params = list(sig.parameters.values())
    plain = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if not all(p.kind in plain for p in params):
        return bind
    most = len(params)
    least = sum(1 for p in params if p.default is inspect.Parameter.empty)

    def check(*args: Any, **kwargs: Any) -> Any:
        if kwargs or not least <= len(args) <= most:
            return bind(*args, **kwargs)
        return None

    return check


def _retry_spec(value: Any) -> Any:
    if value is True or value is False:
        return value
    if isinstance(value, type) and issubclass(value, BaseException):
        return [value]
    if isinstance(value, list | tuple) and all(isinstance(v, type) for v in value):
        return list(value)
    raise TypeError(f"retry_exceptions must be a bool or a list of exception classes, "
                    f"got {value!r}")


def _max_retries(value: Any) -> int:
    """`max_retries` as a count: 3 by default, and -1 (as in Ray) for retrying forever."""
    if value is None:
        return 3
    retries = int(value)
    if retries < -1:
        raise ValueError(f"max_retries must be -1 (retry forever) or >= 0, got {value}")
    return sys.maxsize if retries == -1 else retries
