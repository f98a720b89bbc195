"""A driver's watch on its own node: without it, a driver whose node died waited forever.

The driver pings its node every `PING_PERIOD_S`; the pings are also how the node tells a
live driver from a dead one over tcp, where it cannot watch a pid. A node on this machine is
dead when its process is gone (a busy node is not); one over tcp when no pong came for
`node_timeout_s()`. Time this process itself stood still (a stalled loop) is not silence.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from zmesh.protocol.messages.common import Ping, Pong
from zmesh.runtime.loop import EventLoop

PING_PERIOD_S = 1.0


def node_timeout_s() -> float:
    """Silence after which a peer (driver or node) counts as dead; ZMESH_PEER_TIMEOUT_S."""
    try:
        return max(1.0, float(os.environ.get("ZMESH_PEER_TIMEOUT_S", "30")))
    except ValueError:
        return 30.0


class NodeWatch:
    """Pings the node from the loop thread; calls `on_lost(why)` once when it died."""

    def __init__(self, loop: EventLoop, node_address: str,
                 on_lost: Callable[[str], None]) -> None:
        self.loop = loop
        self.node_address = node_address
        self.on_lost = on_lost
        self.node_id = ""
        self.pid = 0
        self.lost = ""
        self._seq = 0
        self._last_pong = self.loop.clock()
        self._last_tick = self._last_pong
        self._timeout = node_timeout_s()

    def start(self, node_id: str, pid: int) -> None:
        """Begin watching (loop thread). `pid` is watched only for a node on this machine."""
        self.node_id = node_id
        self.pid = pid if self.node_address.startswith("ipc://") else 0
        self._last_pong = self._last_tick = self.loop.clock()
        self._tick()

    def on_pong(self, sender: str, msg: Pong, bufs: list[Any]) -> None:
        """The node's answer (it answers from its mesh address, not the one we dial)."""
        self._last_pong = self.loop.clock()

    def _tick(self) -> None:
        if self.lost:
            return
        from zmesh.store.sweep import pid_alive  # (imports shutil, tempfile: not at start)

        if self.pid and not pid_alive(self.pid):
            self._lose(f"its process (pid={self.pid}) exited")
            return
        now = self.loop.clock()
        if now - self._last_tick > self._timeout / 2:  # we stood still: pongs may be queued
            self._last_pong = now
        self._last_tick = now
        silent = now - self._last_pong
        if not self.pid and silent > self._timeout:
            self._lose(f"it did not answer for {silent:.0f}s")
            return
        self._seq += 1
        self.loop.send(self.node_address, Ping(seq=self._seq))
        self.loop.call_later(PING_PERIOD_S, self._tick)

    def _lose(self, detail: str) -> None:
        self.lost = (f"the zmesh node {self.node_id or '?'} at {self.node_address}, which this "
                     f"driver was connected to, died: {detail}")
        self.on_lost(self.lost)
