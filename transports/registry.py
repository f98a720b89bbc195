"""The transport registry: address scheme -> endpoint factory, loaded lazily by dotted path.

`open_endpoint("ipc:///run/zmesh/n.sock")` picks the factory registered for `ipc`. Built-in
transports are registered as dotted paths so importing zmesh.transports stays cheap and a
plugin's import error surfaces only when its scheme is used.
"""

from __future__ import annotations

import difflib
import importlib
import threading
from collections.abc import Callable
from typing import Any

from zmesh.errors import TransportError

from .base import Endpoint

__all__ = ["EndpointFactory", "open_endpoint", "register_transport", "registered_schemes"]

EndpointFactory = Callable[..., Endpoint]
"""Called as `factory(address, **options)`; returns a bound, open Endpoint."""

_ZMQ = "zmesh.transports.zmq_transport:open_zmq_endpoint"
_lock = threading.Lock()
_factories: dict[str, EndpointFactory | str] = {
    "tcp": _ZMQ,
    "ipc": _ZMQ,
    "inproc": _ZMQ,
    "mem": "zmesh.transports.memory:open_memory_endpoint",
}


def register_transport(
    scheme: str, factory: EndpointFactory | str, *, replace: bool = False
) -> None:
    """Route addresses `scheme://...` to `factory` (a callable or "module:attribute" path).

    Raises ValueError if the scheme is malformed or taken and `replace` is False.
    """
    if not scheme or not scheme.replace("+", "").replace("-", "").isalnum():
        raise ValueError(f"transport scheme {scheme!r} must be letters, digits, '+' or '-'")
    if isinstance(factory, str) and ":" not in factory:
        raise ValueError(f"factory path {factory!r} must look like 'package.module:attribute'")
    with _lock:
        if scheme in _factories and not replace:
            raise ValueError(
                f"transport scheme {scheme!r} is already registered; pass replace=True to override"
            )
        _factories[scheme] = factory


def registered_schemes() -> list[str]:
    """The schemes open_endpoint understands, sorted."""
    with _lock:
        return sorted(_factories)


def open_endpoint(address: str, **options: Any) -> Endpoint:
    """Bind an inbound endpoint at `address` with the transport its scheme names.

    Raises TransportError for an address without a scheme, an unknown scheme (suggesting
    the closest known one), or a bind that fails.
    """
    scheme, sep, rest = address.partition("://")
    if not sep or not scheme:
        raise TransportError(
            f"address {address!r} has no scheme; expected e.g. 'tcp://127.0.0.1:0', "
            "'ipc:///path/to/sock' or 'mem://name'"
        )
    factory = _resolve(scheme)
    return factory(address, **options)


def _resolve(scheme: str) -> EndpointFactory:
    with _lock:
        factory = _factories.get(scheme)
        known = list(_factories)
    if factory is None:
        # Two swapped letters ("icp") are the likeliest typo; difflib scores them no better
        # than other near misses, so look for them first.
        close = [k for k in known if sorted(k) == sorted(scheme)]
        close = close or difflib.get_close_matches(scheme, known, n=1, cutoff=0.5)
        hint = f"; did you mean {close[0]!r}?" if close else f"; known schemes: {sorted(known)}"
        raise TransportError(f"no transport for scheme {scheme!r}{hint}")
    if isinstance(factory, str):
        factory = _load(scheme, factory)
    return factory


def _load(scheme: str, path: str) -> EndpointFactory:
    module_name, _, attribute = path.partition(":")
    try:
        loaded = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise TransportError(
            f"transport for scheme {scheme!r} could not be loaded from {path!r}: {exc}"
        ) from exc
    if not callable(loaded):
        raise TransportError(f"transport factory {path!r} for scheme {scheme!r} is not callable")
    with _lock:
        if _factories.get(scheme) == path:
            _factories[scheme] = loaded
    return loaded  # type: ignore[no-any-return]
