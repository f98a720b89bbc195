"""The node's side of stored objects that cross nodes: pins that pull, frees that reach copies.

A reader on this node that pins an object whose location names another node gets a local
secondary copy first (`ObjectTransfer.pull`, concurrent pins merged), then the pin is
answered with the local location. Every free goes through `ObjectTransfer.free`, which
also frees the copies other nodes pulled from here; a free naming another node as the
primary's holder (a task's return made there) is forwarded to it.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

from zmesh.errors import ObjectLostError
from zmesh.protocol.messages import runtime as m
from zmesh.runtime import values
from zmesh.runtime.loop import EventLoop
from zmesh.runtime.node_mesh import IPC_LABEL
from zmesh.runtime.object_transfer import ObjectTransfer

if TYPE_CHECKING:
    from zmesh.runtime.node import Node

__all__ = ["NodeObjects"]

logger = logging.getLogger("zmesh.node")


class NodeObjects:
    """Pins, frees and transfers of one node's objects (its loop thread only)."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.transfer = ObjectTransfer(node.store, mapper=node.store.mapper)

    def register(self, loop: EventLoop) -> None:
        self.transfer.register(loop, handle_free=False)
        loop.on(m.PinObject, self.on_pin)
        loop.on(m.FreeObjects, self.on_free)

    # -- pins ------------------------------------------------------------------------------
    def on_pin(self, sender: str, msg: m.PinObject, bufs: list[Any]) -> None:
        src, store, oid = msg.source, self.node.store, msg.object_id
        if src is None or not src.node or src.node == self.node.node_id or (
                store.contains(oid) and store.is_sealed(oid)):
            self._pin(sender, msg)
            return
        address = self._address_of(src.node)
        if address is None:
            self._refuse(sender, msg, ObjectLostError(
                f"object {oid.hex()} is lost: its copy was on node {src.node}, which "
                f"{self._why_unreachable(src.node)}"))
            return

        def pulled(object_id: bytes, error: BaseException | None) -> None:
            if error is not None:
                self._refuse(sender, msg, error)
            elif msg.client in self.node.clients:  # a reader that died meanwhile pins nothing
                self._pin(sender, msg)

        self.transfer.pull(oid, address, src.size, pulled)

    def _pin(self, sender: str, msg: m.PinObject) -> None:
        try:
            loc = self.node.store.pin(msg.object_id, msg.client)
        except Exception as exc:
            self._refuse(sender, msg, ObjectLostError(
                f"object {msg.object_id.hex()} is not in the store: {exc}"))
            return
        self.node.loop.send(sender, m.AllocReply(request_id=msg.request_id, loc=m.StoreLoc(
            node=self.node.node_id, segment=loc.segment, offset=loc.offset, size=loc.size,
            object_id=msg.object_id)))

    def _refuse(self, sender: str, msg: m.PinObject, error: BaseException) -> None:
        self.node.loop.send(sender, m.AllocReply(request_id=msg.request_id,
                                                 error=values.encode_error(error).data))

    # -- frees -----------------------------------------------------------------------------
    def on_free(self, sender: str, msg: m.FreeObjects, bufs: list[Any]) -> None:
        self.transfer.free(msg.object_ids)
        if msg.node and msg.node != self.node.node_id:
            address = self._address_of(msg.node)
            if address is not None:  # a dead holder took its copy with it
                self.node.loop.send(address, m.FreeObjects(object_ids=list(msg.object_ids)))

    # -- membership and shutdown -----------------------------------------------------------
    def node_gone(self, node_id: str, address: str, why: str) -> None:
        """Pulls from a dead node fail (or move on) at once, its copies are forgotten, and
        the local clients fail what they borrowed from owners that lived there."""
        self.transfer.peer_died(address)
        ipc = self._ipc_of(address)
        died = m.NodeDied(node_id=node_id, address=address,
                          ipc_dir=os.path.dirname(ipc[len("ipc://"):]) if ipc else "", why=why)
        for client in list(self.node.clients):
            self.node.loop.send(client, died)

    def close(self) -> None:
        self.transfer.close()

    def _address_of(self, node_id: str) -> str | None:
        mesh = self.node.mesh
        return mesh.live_address(node_id) if mesh is not None else None

    def _ipc_of(self, address: str) -> str:
        mesh = self.node.mesh
        if mesh is None:
            return ""
        for info in mesh.membership.members().values():
            if info.address == address:
                return info.metadata.labels.get(IPC_LABEL, "")
        return ""

    def _why_unreachable(self, node_id: str) -> str:
        mesh = self.node.mesh
        why = mesh.dead_nodes.get(node_id) if mesh is not None else None
        return why or "is not a live member of this mesh"
