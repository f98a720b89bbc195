"""Which owner each object a node stores belongs to, so that an owner's death frees it.

An object leaves a node's store when its owner frees it (FreeObjects, forwarded from the
primary's holder to every node that pulled a copy). An owner that died frees nothing, so
the node frees, on its own, every object it stores whose owner is dead: the objects
allocated here (a put, a task's return made here for an owner elsewhere) and the secondary
copies pulled from another node (the owner travels with the location a reader pins). The
owner's death is either the death of a local process or the death of the node it lived on
(the owners there are the node itself and every process whose address starts with the
node's local prefix, as readers judge it on NodeDied). Sans-IO: the node's shell
(`zmesh.runtime.node.objects`) feeds it and frees what it returns.
"""

from __future__ import annotations

from collections import deque

__all__ = ["RecentFrees", "StoredOwners"]

FREES_KEPT_S = 60.0
"""How long a node remembers a free it forwarded to a holder: longer than the mesh takes to
find a dead node, so a free the holder died before handling is sent on when it is found."""
FREES_KEPT_MAX = 4096
"""The most object ids remembered per holder (the oldest go first)."""


class StoredOwners:
    """Object id -> owner address for the objects one node stores, and back."""

    def __init__(self) -> None:
        self._owner_of: dict[bytes, str] = {}
        self._owned: dict[str, set[bytes]] = {}

    def note(self, object_id: bytes, owner: str) -> None:
        """The node stores `object_id` for `owner` (an unknown owner, "", is not noted: only
        its free can remove the object)."""
        if not owner:
            return
        old = self._owner_of.get(object_id)
        if old == owner:
            return
        if old is not None:
            self.forget([object_id])
        self._owner_of[object_id] = owner
        self._owned.setdefault(owner, set()).add(object_id)

    def owner_of(self, object_id: bytes) -> str:
        return self._owner_of.get(object_id, "")

    def forget(self, object_ids: list[bytes]) -> None:
        """The objects were freed."""
        for oid in object_ids:
            owner = self._owner_of.pop(oid, None)
            if owner is None:
                continue
            owned = self._owned.get(owner)
            if owned is not None:
                owned.discard(oid)
                if not owned:
                    del self._owned[owner]

    def owner_died(self, owner: str) -> list[bytes]:
        """The process at `owner` died: the objects to free now (forgotten here)."""
        ids = sorted(self._owned.pop(owner, set()))
        for oid in ids:
            self._owner_of.pop(oid, None)
        return ids

    def node_died(self, address: str, prefix: str) -> list[bytes]:
        """The node at `address` died, and with it every owner at `address` or whose
        address starts with `prefix` (when not empty): the objects to free now."""
        dead = [o for o in self._owned if o == address or (prefix and o.startswith(prefix))]
        out: list[bytes] = []
        for owner in dead:
            out.extend(self.owner_died(owner))
        return out

    def validate(self) -> None:
        """The two maps agree."""
        for oid, owner in self._owner_of.items():
            assert oid in self._owned.get(owner, ()), (oid.hex(), owner)
        for owner, ids in self._owned.items():
            assert ids, owner
            for oid in ids:
                assert self._owner_of.get(oid) == owner, (oid.hex(), owner)

    def __len__(self) -> int:
        return len(self._owner_of)


class RecentFrees:
    """The frees a node forwarded to other nodes (the holders of the primary copies), kept a
    while: a holder that dies before it handles one frees neither its copy nor the copies
    it let other nodes pull, and only it knew where those are; so when it is found dead the
    node sends those frees to every live node (a node with no copy ignores them)."""

    def __init__(self, kept_s: float = FREES_KEPT_S, kept_max: int = FREES_KEPT_MAX) -> None:
        self._kept_s = kept_s
        self._sent: dict[str, deque[tuple[float, bytes]]] = {}
        self._max = kept_max

    def sent(self, holder: str, object_ids: list[bytes], now: float) -> None:
        q = self._sent.get(holder)
        if q is None:
            q = self._sent[holder] = deque(maxlen=self._max)
        while q and q[0][0] < now - self._kept_s:
            q.popleft()
        q.extend((now, oid) for oid in object_ids)

    def holder_died(self, holder: str, now: float) -> list[bytes]:
        """The frees sent to `holder` lately, which it may never have handled."""
        q = self._sent.pop(holder, None)
        return [oid for t, oid in q if t >= now - self._kept_s] if q else []
