"""A network link of a chosen speed between this process and a child network namespace.

`shaped_link(gbit)` makes a namespace joined to the root namespace by a veth pair, gives the
two ends their own 10.x addresses, and shapes both directions with a token bucket (`tc tbf`)
to `gbit` Gbit/s, so a benchmark can move data "between two machines" over a link with a
real network's bandwidth instead of loopback's memory-copy speed. Nothing leaves this
machine: the veth pair is its own wire. Needs root and iproute2; everything made is removed
on exit, also when the body raises.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

SUBNET = "10.213.{}.{}"


@dataclass(frozen=True)
class Link:
    """The namespace's name and the two ends' addresses (`local` is in the root namespace)."""

    namespace: str
    local: str
    remote: str

    def command(self, argv: list[str]) -> list[str]:
        """`argv` run inside the namespace."""
        return ["ip", "netns", "exec", self.namespace, *argv]


def link_unusable() -> str:
    """Why a shaped link cannot be made here, or '' when it can."""
    if os.geteuid() != 0:
        return "needs root (ip netns, tc)"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"needs the {tool} command (iproute2)"
    return ""


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, text=True, timeout=10)


@contextmanager
def shaped_link(gbit: float) -> Iterator[Link]:
    """A namespace behind a veth pair shaped to `gbit` Gbit/s each way (see module doc)."""
    why = link_unusable()
    if why:
        raise RuntimeError(f"cannot make a shaped link: {why}")
    tag = os.getpid() % 250 + 1
    ns, here, there = f"zmblink{tag}", f"zmbl{tag}a", f"zmbl{tag}b"
    local, remote = SUBNET.format(tag, 1), SUBNET.format(tag, 2)
    rate = f"{int(gbit * 1000)}mbit"
    # A burst of ~2 ms at the link rate (at least 1 MiB) lets tbf keep up with 1 MiB frames.
    burst = max(1 << 20, int(gbit * 1e9 / 8 * 0.002))
    try:
        _run("ip", "netns", "add", ns)
        _run("ip", "link", "add", here, "type", "veth", "peer", "name", there)
        _run("ip", "link", "set", there, "netns", ns)
        _run("ip", "addr", "add", f"{local}/30", "dev", here)
        _run("ip", "link", "set", here, "up")
        _run("ip", "netns", "exec", ns, "ip", "addr", "add", f"{remote}/30", "dev", there)
        _run("ip", "netns", "exec", ns, "ip", "link", "set", there, "up")
        _run("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
        for argv in (["tc"], ["ip", "netns", "exec", ns, "tc"]):
            dev = here if len(argv) == 1 else there
            _run(*argv, "qdisc", "add", "dev", dev, "root", "tbf", "rate", rate,
                 "burst", str(burst), "latency", "20ms")
        yield Link(ns, local, remote)
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)
        subprocess.run(["ip", "link", "del", here], capture_output=True, timeout=10)
