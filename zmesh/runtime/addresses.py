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

__all__ = ["LOOPBACK_BIND", "bind_to_reach", "host_to_bind", "owner_prefix"]

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


ANY_HOSTS = ("0.0.0.0", "", "*")


def host_to_bind(host: str) -> str:
    """The address a node binds for `--host`: itself, except for "any address" (0.0.0.0),
    which other machines cannot reach or prove, and a node is named by the address it
    binds. For that, this machine's address: the one its default route leaves by, else its
    first interface that is not loopback. ValueError when there is none."""
    if host not in ANY_HOSTS:
        return host
    found = _default_route_source() or _first_interface_address()
    if not found:
        raise ValueError("--host 0.0.0.0: a node is named by the address it binds, and other "
                         "machines cannot reach 0.0.0.0; no address of this machine was found "
                         "to use instead: pass it with --host")
    return found


def _default_route_source() -> str:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("10.255.255.255", 9))  # a route lookup: UDP connect sends nothing
            local = str(probe.getsockname()[0])
    except OSError:
        return ""
    return "" if local.startswith("127.") or local == "0.0.0.0" else local


def _first_interface_address() -> str:
    import fcntl
    import struct

    siocgifaddr = 0x8915  # Linux: an interface's IPv4 address
    for _, name in socket.if_nameindex():
        if name == "lo":
            continue
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                packed = fcntl.ioctl(s.fileno(), siocgifaddr,
                                     struct.pack("256s", name[:15].encode()))
        except OSError:  # no IPv4 address on it
            continue
        address = socket.inet_ntoa(packed[20:24])
        if not address.startswith("127."):
            return address
    return ""


def owner_prefix(ipc_dir: str) -> str:
    """What the addresses of a node's processes start with, from the `ipc_dir` a NodeDied or
    NodeBack carries ("" when unknown: then only the node's own address counts)."""
    if not ipc_dir:
        return ""
    return ipc_dir if "://" in ipc_dir else f"ipc://{ipc_dir}/"
