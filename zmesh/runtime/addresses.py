"""The local address a client binds to be answered by a node it reaches over tcp.

A zmesh process is named by the address it receives at: the node it talks to answers it
there, and first asks there who receives (`zmesh.transports.zmq_proof`). So a driver or a
`zmesh status` on one machine that talks to a node on another must not bind 127.0.0.1 (on
the node's machine that is the node's own loopback: nothing of the client's is delivered,
and no answer reaches it). It binds the interface its traffic to the node leaves by;
127.0.0.1 only for a node on loopback (or one it cannot route to, or an IPv6 one: zmesh's
tcp sockets are IPv4).
"""

from __future__ import annotations

import socket

__all__ = ["LOOPBACK_BIND", "bind_to_reach"]

LOOPBACK_BIND = "tcp://127.0.0.1:0"


def bind_to_reach(address: str) -> str:
    """A tcp bind (any free port) on the local interface that routes to `address` (a node's
    tcp://host:port or host:port)."""
    hostport = address.removeprefix("tcp://")
    if "://" in hostport:  # ipc:// and the like: nothing to route
        return LOOPBACK_BIND
    host, sep, port = hostport.rpartition(":")
    if not sep or not host or host == "localhost" or host.startswith("127."):
        return LOOPBACK_BIND
    try:
        family, _, _, _, sockaddr = socket.getaddrinfo(
            host, int(port) if port.isdigit() else 0, socket.AF_INET, socket.SOCK_DGRAM)[0]
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect(sockaddr)  # UDP: nothing is sent; the kernel picks the source
            local = str(probe.getsockname()[0])
    except (OSError, IndexError, ValueError):
        return LOOPBACK_BIND
    return LOOPBACK_BIND if local.startswith("127.") else f"tcp://{local}:0"
