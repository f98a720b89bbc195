"""The scheme registry: lookup, lazy loading by dotted path, and errors that say what to do."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from zmesh.errors import TransportError
from zmesh.transports import (
    Endpoint,
    MemoryNetwork,
    open_endpoint,
    register_transport,
    registered_schemes,
)
from zmesh.transports import registry as registry_module


@pytest.fixture
def restore_registry() -> Iterator[None]:
    saved = dict(registry_module._factories)
    yield
    registry_module._factories.clear()
    registry_module._factories.update(saved)


def test_builtin_schemes_are_registered() -> None:
    assert {"tcp", "ipc", "inproc", "mem"} <= set(registered_schemes())


def test_unknown_scheme_suggests_the_closest_known_one() -> None:
    with pytest.raises(TransportError, match="no transport for scheme 'tpc'; did you mean 'tcp'?"):
        open_endpoint("tpc://127.0.0.1:0")
    with pytest.raises(TransportError, match="no transport for scheme 'icp'; did you mean 'ipc'?"):
        open_endpoint("icp:///tmp/x")


def test_unrelated_scheme_lists_the_known_ones() -> None:
    with pytest.raises(TransportError, match="known schemes: .*'tcp'"):
        open_endpoint("zzzzzz://x")


def test_address_without_scheme_is_refused_with_an_example() -> None:
    with pytest.raises(TransportError, match="has no scheme; expected e.g. 'tcp://127.0.0.1:0'"):
        open_endpoint("127.0.0.1:5555")


def test_registered_factory_receives_address_and_options(restore_registry: None) -> None:
    network = MemoryNetwork()
    seen: list[tuple[str, dict[str, Any]]] = []

    def factory(address: str, **options: Any) -> Endpoint:
        seen.append((address, options))
        return network.open("mem://" + address.partition("://")[2])

    register_transport("sim", factory)
    endpoint = open_endpoint("sim://node-1", flavour="test")
    try:
        assert seen == [("sim://node-1", {"flavour": "test"})]
        assert endpoint.address == "mem://node-1"
    finally:
        network.close()


def test_factory_given_as_dotted_path_is_loaded_on_first_use(restore_registry: None) -> None:
    register_transport("mem", "zmesh.transports.memory:open_memory_endpoint", replace=True)
    assert registry_module._factories["mem"] == "zmesh.transports.memory:open_memory_endpoint"
    endpoint = open_endpoint("mem://lazy", network=MemoryNetwork())
    endpoint.close()
    assert callable(registry_module._factories["mem"])


def test_factory_path_that_does_not_import_names_the_scheme(restore_registry: None) -> None:
    register_transport("broken", "zmesh.no_such_module:factory")
    with pytest.raises(TransportError, match="scheme 'broken' could not be loaded"):
        open_endpoint("broken://x")


def test_taken_scheme_needs_replace(restore_registry: None) -> None:
    with pytest.raises(ValueError, match="already registered; pass replace=True"):
        register_transport("tcp", "zmesh.transports.memory:open_memory_endpoint")
    register_transport("tcp", "zmesh.transports.memory:open_memory_endpoint", replace=True)


def test_malformed_registrations_are_refused() -> None:
    with pytest.raises(ValueError, match="letters, digits"):
        register_transport("has space", "a.b:c")
    with pytest.raises(ValueError, match="package.module:attribute"):
        register_transport("ok", "no_colon_here")
