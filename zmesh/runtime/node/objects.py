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
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from zmesh.core.stored_owners import RecentFrees, StoredOwners
from zmesh.errors import ObjectLostError, ObjectStoreFullError
from zmesh.protocol.messages import runtime as m
from zmesh.protocol.messages.transfer import ChunkRequest, LocalReadRequest
from zmesh.runtime import values
from zmesh.runtime.addresses import owner_prefix
from zmesh.runtime.loop import EventLoop
from zmesh.runtime.node.mesh import BOOT_LABEL, IPC_LABEL
from zmesh.runtime.node.object_transfer import ObjectTransfer
from zmesh.store.local_read import boot_id

if TYPE_CHECKING:
    from zmesh.runtime.node.server import Node

__all__ = ["NodeObjects"]

logger = logging.getLogger("zmesh.node")

LOCAL_COPY_ENV = "ZMESH_LOCAL_COPY"
"""0: pull objects from nodes on this machine through the socket too (no file copies)."""


class NodeObjects:
    """Pins, frees and transfers of one node's objects (its loop thread only)."""

    def __init__(self, node: Node) -> None:
        self.node = node
        # Sources on this machine (same boot id advertised) are first asked for a local copy
        # (ZMESH_LOCAL_COPY=0: never, every pull goes through the socket).
        local = os.environ.get(LOCAL_COPY_ENV, "1") != "0"
        self.transfer = ObjectTransfer(node.store, mapper=node.store.mapper, clock=node.loop.clock,
                                       local_root=os.path.dirname(node.store_dir) if local
                                       else None, local_hint=self._maybe_same_machine)
        # Seal travels on the writer's connection, the reader's pin or a peer's chunk request
        # on another, so they can overtake it: they wait here for the seal.
        self._unsealed: dict[bytes, list[Callable[[], None]]] = {}
        # Objects stored here (allocated or pulled) by owner, so that an owner's death frees
        # them (nobody else would: the owner's FreeObjects is what frees an object).
        self.owners = StoredOwners()
        self.recent_frees = RecentFrees()  # forwarded to holders: sent on if one dies

    def register(self, loop: EventLoop) -> None:
        self.transfer.register(loop, handle_free=False)
        loop.on(m.PinObject, self.on_pin)
        loop.on(m.FreeObjects, self.on_free)
        loop.on(m.SealObject, self.on_seal)
        loop.on(ChunkRequest, self.on_chunk_request)  # in place of the transfer's own
        loop.on(LocalReadRequest, self.on_local_request)  # likewise

    # -- pins ------------------------------------------------------------------------------
    def on_pin(self, sender: str, msg: m.PinObject, bufs: list[Any]) -> None:
        src, store, oid = msg.source, self.node.store, msg.object_id
        if self._wait_for_seal(oid, lambda: self.on_pin(sender, msg, bufs)):
            return
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
                return
            if store.contains(oid):  # a copy now lies here: its owner's death frees it too
                self.owners.note(oid, src.owner)
            if msg.client in self.node.clients:  # a reader that died meanwhile pins nothing
                self._pin(sender, msg)

        self.transfer.pull(oid, address, src.size, pulled)

    def _pin(self, sender: str, msg: m.PinObject) -> None:
        # Restoring a spilled object may need room that readers' idle pins hold.
        self.node.room.when_room(lambda final: self._try_pin(sender, msg, final))

    def _try_pin(self, sender: str, msg: m.PinObject, final: bool) -> bool:
        """Pin and answer (True), or False when there is no room yet and not `final`. A
        reader this node already released (its request came late) pins nothing: nobody
        would give that pin back, and the object would stay for good."""
        if msg.client not in self.node.clients:
            self._refuse(sender, msg, ObjectLostError(
                f"object {msg.object_id.hex()} not pinned: its reader {msg.client} is not a "
                f"live process of node {self.node.node_id}"))
            return True
        try:
            loc = self.node.store.pin(msg.object_id, msg.client)
        except Exception as exc:
            if isinstance(exc, ObjectStoreFullError) and not final:
                return False
            self._refuse(sender, msg, ObjectLostError(
                f"object {msg.object_id.hex()} is not in the store: {exc}"))
            return True
        self.node.loop.send(sender, m.AllocReply(request_id=msg.request_id, loc=m.StoreLoc(
            node=self.node.node_id, segment=loc.segment, offset=loc.offset, size=loc.size,
            object_id=msg.object_id, owner=self.owners.owner_of(msg.object_id))))
        return True

    def _refuse(self, sender: str, msg: m.PinObject, error: BaseException) -> None:
        self.node.loop.send(sender, m.AllocReply(request_id=msg.request_id,
                                                 error=values.encode_error(error).data))

    # -- seals -----------------------------------------------------------------------------
    def on_seal(self, sender: str, msg: m.SealObject, bufs: list[Any]) -> None:
        try:
            self.node.store.seal(msg.object_id)
        except Exception as exc:
            logger.warning("seal of object %s failed: %s", msg.object_id.hex(), exc)
        self._wake(msg.object_id)

    def on_chunk_request(self, sender: str, msg: ChunkRequest, bufs: list[Any]) -> None:
        if not self._wait_for_seal(msg.object_id,
                                   lambda: self.transfer.on_chunk_request(sender, msg, bufs)):
            self.transfer.on_chunk_request(sender, msg, bufs)

    def on_local_request(self, sender: str, msg: LocalReadRequest, bufs: list[Any]) -> None:
        if not self._wait_for_seal(msg.object_id,
                                   lambda: self.transfer.on_local_request(sender, msg, bufs)):
            self.transfer.on_local_request(sender, msg, bufs)

    def _wait_for_seal(self, object_id: bytes, retry: Callable[[], None]) -> bool:
        """Queue `retry` if a local writer has yet to seal the object (not a pull's copy)."""
        store = self.node.store
        if not store.contains(object_id) or store.is_sealed(object_id) or \
                self.transfer.manager.pulling(object_id):
            return False
        self._unsealed.setdefault(object_id, []).append(retry)
        return True

    def _wake(self, object_id: bytes) -> None:
        for retry in self._unsealed.pop(object_id, ()):
            retry()

    # -- frees -----------------------------------------------------------------------------
    def note_owner(self, object_id: bytes, owner: str) -> None:
        """`owner` owns the object just allocated here."""
        self.owners.note(object_id, owner)

    def owner_gone(self, owner: str) -> None:
        """A dead owner's objects will never be freed by it: free them now, with every copy."""
        self._free_orphans(self.owners.owner_died(owner))

    def _free_orphans(self, ids: list[bytes]) -> None:
        if ids:
            self.transfer.free(ids)
            for oid in ids:
                self._wake(oid)

    def on_free(self, sender: str, msg: m.FreeObjects, bufs: list[Any]) -> None:
        self.owners.forget(msg.object_ids)
        self.transfer.free(msg.object_ids)
        for oid in msg.object_ids:  # waiters for a seal that will not come now fail
            self._wake(oid)
        if msg.node and msg.node != self.node.node_id:
            address = self._address_of(msg.node)
            if address is not None:
                self.node.loop.send(address, m.FreeObjects(object_ids=list(msg.object_ids)))
                self.recent_frees.sent(msg.node, list(msg.object_ids), self.node.loop.clock())
            else:
                # A dead holder took its primary copy with it, and its list of the nodes
                # that pulled copies: the owner still frees those, so every live node hears
                # the free (one that holds no copy ignores it).
                self._free_everywhere(list(msg.object_ids))

    def _free_everywhere(self, object_ids: list[bytes]) -> None:
        mesh = self.node.mesh
        if mesh is None:
            return
        for node_id in list(mesh.node_address):
            if node_id == self.node.node_id:
                continue
            address = mesh.live_address(node_id)
            if address is not None:
                self.node.loop.send(address, m.FreeObjects(object_ids=object_ids))

    # -- membership and shutdown -----------------------------------------------------------
    def node_gone(self, node_id: str, address: str, why: str) -> None:
        """Pulls from a dead node fail (or move on) at once, its copies are forgotten, and
        the local clients fail what they borrowed from owners that lived there."""
        ipc = self._ipc_of(address)
        died = m.NodeDied(node_id=node_id, address=address, ipc_dir=_local_prefix(ipc), why=why)
        # Before the failed pulls' answers, so a reader knows the owner died when they come.
        for client in list(self.node.clients):
            self.node.loop.send(client, died)
        self.transfer.peer_died(address)
        # Every object stored here (allocated, or a copy pulled from any node) whose owner
        # lived there will never be freed by it: free it now (its readers give their pins
        # back when asked, and fail to read it anyway: its owner died).
        self._free_orphans(self.owners.node_died(address, owner_prefix(died.ipc_dir)))
        # Frees sent to it lately may have died with it, and only it knew who pulled copies.
        late = self.recent_frees.holder_died(node_id, self.node.loop.clock())
        if late:
            self._free_everywhere(late)

    def fence(self) -> None:
        """The mesh declared this node dead (`Node._fence`): each node we pulled a copy from
        forgot it (`peer_died`), so the owner's free, which reaches the copies through the
        node that holds the primary, would never come here: the copies would stay for good.
        Free them now (readers still pinning one keep it until they unpin; a new reader
        pulls again), with the copies other nodes pulled from ours."""
        ids = self.node.store.secondaries()
        if ids:
            logger.info("this node was declared dead: freeing the %d copies it pulled",
                        len(ids))
            self.owners.forget(ids)
            self._free_orphans(ids)

    def node_back(self, node_id: str, address: str) -> None:
        """A node we reported dead answers again: tell the local clients, so their owners
        take its new processes for live ones (its old ones it killed, see server.py)."""
        back = m.NodeBack(node_id=node_id, address=address,
                          ipc_dir=_local_prefix(self._ipc_of(address)))
        for client in list(self.node.clients):
            self.node.loop.send(client, back)
        self.transfer.peer_back(address)  # the pulls from it we left hold pins there

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

    def _maybe_same_machine(self, address: str) -> bool:
        """Whether the node at `address` says it runs on this machine (only a hint: the
        file it names is verified before a byte is read)."""
        mesh = self.node.mesh
        if mesh is None or not boot_id():
            return False
        for info in mesh.membership.members().values():
            if info.address == address:
                return info.metadata.labels.get(BOOT_LABEL, "") == boot_id()
        return False

    def _why_unreachable(self, node_id: str) -> str:
        mesh = self.node.mesh
        why = mesh.dead_nodes.get(node_id) if mesh is not None else None
        return why or "is not a live member of this mesh"


def _local_prefix(ipc: str) -> str:
    """What the addresses of a node's local processes start with: its ipc directory (sent
    bare, as older clients expect), or, on other transports, `address/`."""
    if not ipc:
        return ""
    if ipc.startswith("ipc://"):
        return os.path.dirname(ipc[len("ipc://"):])
    return ipc.rstrip("/") + "/"
