"""`@remote` classes: ActorClass.remote() starts an actor; handle.method.remote() calls it."""

from __future__ import annotations

import functools
import inspect
from typing import Any

import cloudpickle

from zmesh.generators import backpressure_of, returned, wire_num_returns
from zmesh.object_ref import ObjectRef
from zmesh.options import (
    ACTOR_OPTIONS,
    actor_resources,
    check_options,
    env_vars_of,
    labels_of,
    omp_env,
    validate_namespace,
)
from zmesh.protocol.messages import runtime as m
from zmesh.remote_function import _Exported, _retry_spec, args_checker
from zmesh.runtime import context
from zmesh.runtime.args import pack_args
from zmesh.runtime.ids import actor_life_id, random_id
from zmesh.runtime.strategies import encode_strategy

METHOD_OPTIONS = frozenset({
    "num_returns", "concurrency_group", "max_task_retries", "retry_exceptions",
    "_generator_backpressure_num_objects", "_num_objects_per_yield", "enable_task_events",
    "tensor_transport"})
"""What `@ray.method(...)` takes, as in Ray; `enable_task_events` and `_num_objects_per_yield`
are accepted and change nothing here (every call is recorded; a generator sends each item)."""

CALL_OPTIONS = frozenset({"num_returns", "name", "concurrency_group", "max_task_retries",
                          "retry_exceptions", "enable_task_events",
                          "_generator_backpressure_num_objects"})
"""What `handle.method.options(...)` takes for one call, as in Ray."""


def method(*args: Any, **options: Any) -> Any:
    """Decorate an actor method, bare (`@ray.method`) or with options as Ray's
    `@ray.method(num_returns=2)`: `num_returns` ("streaming", a generator's default, or
    "dynamic" for generators), `concurrency_group` to run it in one of the class's groups,
    `max_task_retries` (overriding the actor's) and `retry_exceptions` (True or exception
    classes: such an exception sends the call again while retries are left),
    `_generator_backpressure_num_objects`, and `tensor_transport="gloo"|"nccl"` to keep
    returned tensors in the actor and move them to consumers over torch.distributed (see
    zmesh.tensor_transport). An option Ray's `ray.method` does not take is an error."""
    if args:
        if len(args) == 1 and callable(args[0]) and not options:
            return args[0]  # bare @ray.method: nothing to change
        raise TypeError("ray.method takes keyword options only, e.g. @ray.method(num_returns=2)")
    unknown = sorted(set(options) - METHOD_OPTIONS)
    if unknown:
        raise ValueError(f"invalid option(s) {unknown} for ray.method; it takes "
                         f"{sorted(METHOD_OPTIONS)}")
    num_returns = options.get("num_returns")
    if num_returns is not None:
        wire_num_returns(num_returns, None)  # validate now
    tensor_transport = options.get("tensor_transport")
    if tensor_transport is not None and tensor_transport not in ("gloo", "nccl"):
        raise ValueError(f"tensor_transport must be 'gloo' or 'nccl', got {tensor_transport!r}")
    retries = _call_retries(options)
    retry_exc = _retry_spec(options["retry_exceptions"]) if "retry_exceptions" in options \
        else None
    backpressure = backpressure_of(options)
    group = options.get("concurrency_group")

    def wrap(fn: Any) -> Any:
        if tensor_transport is not None:
            from zmesh.tensor_transport.method import with_tensor_transport

            fn = with_tensor_transport(fn, tensor_transport)
        if num_returns is not None:
            fn.__zmesh_num_returns__ = num_returns
        if group is not None:
            fn.__zmesh_concurrency_group__ = group
        if retries is not None:
            fn.__zmesh_max_task_retries__ = retries
        if retry_exc is not None:
            fn.__zmesh_retry_exceptions__ = retry_exc
        if backpressure:
            fn.__zmesh_backpressure__ = backpressure
        return fn

    return wrap


def _call_retries(options: dict[str, Any]) -> int | None:
    value = options.get("max_task_retries")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < -1:
        raise ValueError(f"max_task_retries must be an int >= 0, or -1 to retry always; "
                         f"got {value!r}")
    return value


MethodOpts = tuple[int | None, Any, int]
"""A method's own call options: (max_task_retries or None for the actor's, retry_exceptions,
generator backpressure)."""


def exit_actor() -> None:
    """End the current actor from inside one of its methods, as Ray's `exit_actor()`: its
    atexit handlers run, it is not restarted, and calls to it fail with an ActorDiedError."""
    client = context.maybe_client()
    if client is None or not client.current_actor_id:
        raise TypeError("exit_actor() can only be called inside an actor")
    from zmesh.errors import ActorExit

    raise ActorExit()


class ActorClass:
    """A class whose instances run as actors: `Cls.remote(*args)` returns an ActorHandle."""

    def __init__(self, cls: type, options: dict[str, Any]) -> None:
        self._cls = cls
        self._options = check_options(dict(options), ACTOR_OPTIONS, f"actor {cls.__name__}")
        self._exported = _Exported(cls)
        self.__name__ = cls.__name__
        self._methods = _method_table(cls)
        self._method_opts = _method_opts(cls)
        self._check_args = args_checker(cls)
        self._is_async = any(inspect.iscoroutinefunction(f)
                             for f in vars(cls).values() if callable(f))

    def __reduce__(self) -> Any:
        return (ActorClass, (self._cls, self._options))

    @property
    def __ray_actor_class__(self) -> type:
        """The user's class, as Ray's `ActorClass.__ray_actor_class__`."""
        return self._cls

    def __getattr__(self, name: str) -> Any:
        # As in Ray, the class's own attributes (constants, static and class methods) stay
        # reachable through the decorated class.
        cls = self.__dict__.get("_cls")
        if cls is None or name.startswith("__"):
            raise AttributeError(name)
        try:
            value = getattr(cls, name)
        except AttributeError:
            raise AttributeError(f"actor class {cls.__name__} has no attribute {name!r}"
                                 ) from None
        if inspect.isfunction(value):
            # a wrapper, not the function itself: cloudpickle finds a function by its
            # qualname ("Cls.method") and would pickle it by reference to the driver's module
            # (it carries the function's name and attributes: libraries find methods marked
            # by their decorators through the remote class, as verl's @register)
            return functools.update_wrapper(functools.partial(value), value)
        return value

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(dir(self.__dict__.get("_cls", object))))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"actor class {self.__name__} cannot be instantiated directly; "
                        f"use {self.__name__}.remote(...)")

    def options(self, **opts: Any) -> ActorClass:
        """A copy with some options changed for the actors created through it."""
        merged = dict(self._options)
        merged.update(check_options(opts, ACTOR_OPTIONS, f"actor {self.__name__}"))
        clone = ActorClass.__new__(ActorClass)
        clone.__dict__.update(self.__dict__)
        clone._options = merged
        return clone

    def remote(self, *args: Any, **kwargs: Any) -> ActorHandle:
        """Start the actor; calls made on the handle queue until it is ready."""
        check = self.__dict__.get("_check_args")
        if check is not None:
            check(*args, **kwargs)  # arguments the constructor cannot take fail here, as in Ray
        client = context.current_client()
        opts = self._options
        name = opts.get("name")
        if name is not None:
            if not isinstance(name, str):
                raise TypeError(f"actor name must be a str, got {name!r}")
            if not name:
                raise ValueError("actor name cannot be an empty string")
        name = name or ""
        namespace = opts.get("namespace")
        if namespace is not None:
            validate_namespace(namespace)
        namespace = namespace or client.namespace
        if name:
            found = named_actor_handle(client, name, namespace)
            if found is not None:
                if opts.get("get_if_exists"):
                    return found
                raise ValueError(f"an actor named {name!r} already exists in namespace "
                                 f"{namespace!r}; use get_if_exists=True to reuse it")
        max_pending = opts.get("max_pending_calls", -1)
        if not isinstance(max_pending, int) or isinstance(max_pending, bool) or (
                max_pending != -1 and max_pending <= 0):
            raise ValueError(f"max_pending_calls must be a positive int or -1 (no limit), got "
                             f"{max_pending!r}")
        self._exported.ensure()
        lifetime = opts.get("lifetime")
        if lifetime not in (None, "detached", "non_detached"):
            raise ValueError(f"lifetime must be 'detached' or None, got {lifetime!r}")
        held, placement = actor_resources(opts)
        max_conc = opts.get("max_concurrency")
        is_async = self._is_async
        if max_conc is None:
            max_conc = 1000 if is_async else 1
        data, top, nested = pack_args(args, kwargs)
        actor_id = random_id(16)
        spec = m.CreateActor(
            actor_id=actor_id, owner=client.address, fn_id=self._exported.fn_id,
            class_name=self.__name__, args=m.Args(data=data), resources=held,
            placement=placement, name=name, namespace=namespace,
            detached=lifetime == "detached", max_restarts=int(opts.get("max_restarts", 0)),
            max_concurrency=int(max_conc), is_async=is_async,
            env_vars=omp_env(env_vars_of(opts, client.default_env), held),
            strategy=(client.inherited_strategy if "scheduling_strategy" not in opts
                      and client.inherited_strategy
                      else encode_strategy(opts.get("scheduling_strategy"))),
            labels=labels_of(opts),
            concurrency_groups=_groups_of(opts),
            fn_blob=self._exported.blob, max_pending_calls=max_pending)
        retries = int(opts.get("max_task_retries", 0))
        if name:  # what a handle got by name needs, kept with the name
            spec.methods = dict(self._methods)
            spec.max_task_retries = retries
            spec.method_opts = cloudpickle.dumps(self._method_opts) if self._method_opts else b""
        # top-level ref arguments are resolved by the runtime, without blocking here: the
        # spec goes to the node once their values exist (calls queue until the actor is up);
        # every ref of the arguments is held while the actor lives
        client.actors.create(spec, retries, top, nested)
        life = None
        if lifetime != "detached":  # its handles are counted: the last one gone ends it
            life = ObjectRef(actor_life_id(actor_id), client.address, client)
            client.actors.lives[life.id] = actor_id
        return ActorHandle(actor_id, self.__name__, self._methods, retries, owned=True,
                           life=life, max_pending_calls=max_pending,
                           unordered=is_async or int(max_conc) > 1,
                           method_opts=self._method_opts)


def _groups_of(opts: dict[str, Any]) -> dict[str, int]:
    groups = opts.get("concurrency_groups") or {}
    if not isinstance(groups, dict) or not all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 1
            for k, v in groups.items()):
        raise ValueError(f"concurrency_groups must map group names to ints >= 1, got {groups!r}")
    return dict(groups)


def _method_table(cls: type) -> dict[str, int]:
    table = {}
    for name, fn in inspect.getmembers(cls, predicate=callable):
        if name.startswith("__") and name != "__call__":
            continue
        table[name] = wire_num_returns(getattr(fn, "__zmesh_num_returns__", None), fn)
    return table


def _method_opts(cls: type) -> dict[str, MethodOpts]:
    """The call options `@ray.method` gave the class's methods (only those it gave any)."""
    table = {}
    for name, fn in inspect.getmembers(cls, predicate=callable):
        opts = (getattr(fn, "__zmesh_max_task_retries__", None),
                getattr(fn, "__zmesh_retry_exceptions__", False),
                getattr(fn, "__zmesh_backpressure__", 0))
        if opts != (None, False, 0):
            table[name] = opts
    return table


class ActorMethod:
    """`handle.method` — call it with `.remote(...)`."""

    def __init__(self, handle: ActorHandle, name: str, num_returns: int,
                 backpressure: int = 0, group: str = "", retries: int | None = None,
                 retry_exceptions: Any = False) -> None:
        self._handle = handle
        self._name = name
        self._num_returns = num_returns
        self._backpressure = backpressure
        self._group = group
        self._retries = retries
        self._retry_exceptions = retry_exceptions

    def options(self, **opts: Any) -> ActorMethod:
        unknown = set(opts) - CALL_OPTIONS
        if unknown:
            raise ValueError(f"invalid option(s) {sorted(unknown)} for actor method "
                             f"{self._name}; a call takes {sorted(CALL_OPTIONS)}")
        n = self._num_returns
        if "num_returns" in opts:
            n = wire_num_returns(opts["num_returns"], None)
        group = opts.get("concurrency_group", self._group) or ""
        if not isinstance(group, str):
            raise TypeError(f"concurrency_group must be a str, got {group!r}")
        backpressure = backpressure_of(opts) if "_generator_backpressure_num_objects" in opts \
            else self._backpressure
        retries = _call_retries(opts) if "max_task_retries" in opts else self._retries
        retry_exc = _retry_spec(opts["retry_exceptions"]) if "retry_exceptions" in opts \
            else self._retry_exceptions
        return ActorMethod(self._handle, self._name, n, backpressure, group, retries, retry_exc)

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        client = context.current_client()
        handle = self._handle
        rec = client.actors.records.get(handle._actor_id) or handle._record(client)
        if handle._unordered:
            rec.unordered = True
        limit = handle._max_pending_calls
        if limit > 0 and client.actors.pending(rec) >= limit:
            from zmesh.errors import PendingCallsLimitExceeded

            raise PendingCallsLimitExceeded(
                f"the call to {handle._class_name}.{self._name} was not submitted: "
                f"{client.actors.pending(rec)} calls are already pending on this actor handle "
                f"(max_pending_calls={limit})")
        data, top, nested = pack_args(args, kwargs)
        n = self._num_returns
        # refs first: a call to a dead actor completes on the loop thread at once, and a value
        # set before its refs exist would be dropped (the get would hang)
        task_id = client.ids.task_id()
        refs = client.make_refs(task_id, n)
        backpressure = self._backpressure if n < 0 else 0
        out = refs[0] if n == 1 else returned(client, n, refs, task_id, backpressure)
        nested_ids = [r.id for r in nested] if nested else []  # (no comprehension for none)
        client.actors.call(rec, self._name, data, top, nested_ids, n, task_id,
                           backpressure=backpressure, group=self._group,
                           retries=self._retries, retry_exceptions=self._retry_exceptions)
        return out

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"actor method {self._name} cannot be called directly; "
                        f"use .{self._name}.remote(...)")


def named_actor_handle(client: Any, name: str, namespace: str) -> ActorHandle | None:
    """A handle on the live actor named `name` in `namespace`, or None."""
    reply = client.lookup_named_actor(name, namespace)
    if reply is None:
        return None
    life = None
    if reply.owner and not reply.detached:  # borrow the handle count from the creator
        life = ObjectRef(actor_life_id(reply.actor_id), reply.owner, client)
        if reply.owner != client.address:
            client.loop.send_threadsafe(reply.owner, m.AddBorrowers(
                object_ids=[life.id], borrower=client.address))
    # Ray keeps the creation's handle fields with the name: the limit and ordering follow it
    # Ray's handle by name knows the class's methods; a name registered before the node
    # kept them (no `methods`) falls back to one return each, as before
    return ActorHandle(reply.actor_id, reply.class_name, dict(reply.methods),
                       reply.max_task_retries, life=life,
                       max_pending_calls=reply.max_pending_calls,
                       unordered=reply.is_async or reply.max_concurrency > 1,
                       method_opts=cloudpickle.loads(reply.method_opts)
                       if reply.method_opts else None)


_HANDLE_FIELDS = frozenset({"_actor_id", "_class_name", "_methods", "_max_task_retries",
                            "_owned", "_max_pending_calls", "_life", "_unordered",
                            "_method_opts"})


class ActorHandle:
    """A reference to an actor; pass it to tasks and other actors freely."""

    def __init__(self, actor_id: bytes, class_name: str, methods: dict[str, int],
                 max_task_retries: int = 0, owned: bool = False,
                 life: ObjectRef | None = None, max_pending_calls: int = -1,
                 unordered: bool = False,
                 method_opts: dict[str, MethodOpts] | None = None) -> None:
        self._actor_id = actor_id
        self._life = life  # counts this handle with the creator (None: detached)
        self._class_name = class_name
        self._methods = methods
        self._max_task_retries = max_task_retries
        self._owned = owned
        # Every handle, passed or looked up by name, keeps the creation's limit (counted per
        # handle in each process, as Ray's) and lets ready calls of threaded/async actors
        # overtake calls still waiting for their arguments.
        self._max_pending_calls = max_pending_calls
        self._unordered = unordered
        self._method_opts = method_opts or {}
        if methods and type(self) is ActorHandle:
            cls = _handle_class(methods)
            if cls is not None:
                self.__class__ = cls

    def _record(self, client: Any) -> Any:
        return client.actors.track(self._actor_id, self._class_name, self._max_task_retries)

    def __getattr__(self, name: str) -> ActorMethod:
        if name == "__ray_terminate__":  # Ray's graceful stop: queued after earlier calls
            return ActorMethod(self, name, 1)
        if (name.startswith("__") and name.endswith("__")) or name in _HANDLE_FIELDS:
            raise AttributeError(name)
        methods = self.__dict__.get("_methods") or {}
        if methods and name not in methods:
            raise AttributeError(f"actor {self._class_name} has no method {name!r}")
        return self._zmesh_method(name, methods)

    def _zmesh_method(self, name: str, methods: dict[str, int]) -> ActorMethod:
        opts = self.__dict__.get("_method_opts")
        own = opts.get(name) if opts else None
        if own is None:
            return ActorMethod(self, name, methods.get(name, 1))
        return ActorMethod(self, name, methods.get(name, 1), own[2], "", own[0], own[1])

    def __reduce__(self) -> Any:
        # The life ref travels inside: the receiver borrows it, so the creator counts it.
        return (ActorHandle, (self._actor_id, self._class_name, self._methods,
                              self._max_task_retries, False, self._life,
                              self._max_pending_calls, self._unordered, self._method_opts))

    def __repr__(self) -> str:
        return f"Actor({self._class_name}, {self._actor_id.hex()[:12]})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ActorHandle) and other._actor_id == self._actor_id

    def __hash__(self) -> int:
        return hash(self._actor_id)


_HANDLE_CLASSES: dict[frozenset[str], type[ActorHandle] | None] = {}
_MAX_HANDLE_CLASSES = 1024


def _handle_class(methods: dict[str, int]) -> type[ActorHandle] | None:
    """A subclass of ActorHandle in which each of the actor's methods is a property, so
    that `handle.method` is a normal attribute lookup: on ActorHandle itself it is a failed
    one, which builds, formats and drops an AttributeError (~1.5 us, every actor call)
    before `__getattr__` runs. One class per set of method names (bounded: past the bound,
    handles stay plain ActorHandles); the property makes the method as `__getattr__` does
    (`_zmesh_method`), so both ways answer the same."""
    key = frozenset(methods)
    if key in _HANDLE_CLASSES:
        return _HANDLE_CLASSES[key]
    if len(_HANDLE_CLASSES) >= _MAX_HANDLE_CLASSES:
        return None
    props = {name: property(_method_getter(name)) for name in key
             if not (name.startswith("__") and name.endswith("__"))
             and name not in _HANDLE_FIELDS and not hasattr(ActorHandle, name)}
    cls = type("ActorHandle", (ActorHandle,), {
        "__module__": ActorHandle.__module__, "__qualname__": ActorHandle.__qualname__,
        **props}) if props else None
    _HANDLE_CLASSES[key] = cls
    return cls


def _method_getter(name: str) -> Any:
    def get(handle: ActorHandle) -> ActorMethod:
        return handle._zmesh_method(name, handle._methods)  # (a name of its methods: no checks)

    return get
