"""zmesh.transports: move frames between processes behind one small interface.

`open_endpoint(address)` binds an inbound endpoint with the transport its scheme names
(`tcp://`, `ipc://`, `inproc://`, `mem://`); `register_transport` adds schemes.
`ChaosEndpoint` wraps any endpoint with seeded faults for tests.
"""

from __future__ import annotations

if __name__ != "zmesh.transports":  # pragma: no cover - a second copy means a second registry
    raise ImportError(
        f"import zmesh.transports, not {__name__!r}: the transports/ folder installs as "
        f"zmesh.transports, and a second copy would have its own registry of schemes"
    )

from .base import Buffer, Endpoint, live_endpoints
from .chaos import ChaosEndpoint, Fate
from .memory import MemoryEndpoint, MemoryNetwork
from .registry import EndpointFactory, open_endpoint, register_transport, registered_schemes
from .zmq_transport import ZmqEndpoint

__all__ = [
    "Buffer",
    "ChaosEndpoint",
    "Endpoint",
    "EndpointFactory",
    "Fate",
    "MemoryEndpoint",
    "MemoryNetwork",
    "ZmqEndpoint",
    "live_endpoints",
    "open_endpoint",
    "register_transport",
    "registered_schemes",
]
