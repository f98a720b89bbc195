"""The client half of a control store member: the calls a program makes (get, put, delete,
list, subscribe) and what they complete with.

Every member of the mesh is both a client and a server of the store; `ControlStore` (in
`control_store`) adds the server half (shards, replication, handoff) to this class. A call
only validates its arguments and queues its first message: the request table
(`control_requests`) resends it until its key's primary answers, and the watch table
(`control_watches`) follows a subscription from primary to primary.
"""

from __future__ import annotations

from zmesh.core.hashring import HashRing
from zmesh.protocol.messages.control import KvDelete, KvGet, KvList, KvPut, KvStatus
from zmesh.store.control_config import check_key, check_prefix, check_value, check_version
from zmesh.store.control_requests import Completion, Outbox, RequestTable
from zmesh.store.control_watches import Notification, WatchTable

__all__ = ["ControlClientCalls"]


class ControlClientCalls:
    """The calls of a store member's client side; each returns the id its completion carries."""

    incarnation: int
    _ring: HashRing
    _view: int
    _next_id: int
    _requests: RequestTable
    _watches: WatchTable

    def _queue(self, now: float, out: Outbox) -> None:
        raise NotImplementedError  # the member sends `out` (ControlStore)

    @property
    def ring(self) -> HashRing:
        return self._ring

    @property
    def view(self) -> int:
        return self._view

    # -- client API -----------------------------------------------------------------------
    def get(self, now: float, key: str) -> int:
        """Read `key`; completes OK with value and version, or NOT_FOUND."""
        check_key(key)
        rid = self._new_id()
        self._queue(now, self._requests.start(now, "get", key, KvGet(rid, key), self))
        return rid

    def put(
        self,
        now: float,
        key: str,
        value: bytes,
        *,
        expected_version: int | None = None,
        if_absent: bool = False,
    ) -> int:
        """Write `key`. With `expected_version` only if the key is at that version (0: never
        existed), else CAS_FAILED; with `if_absent` only if it has no live value, else EXISTS
        with the current value (get-if-exists). Completes with the new version."""
        check_key(key)
        data = check_value(key, value)
        check_version(expected_version)
        if if_absent and expected_version is not None:
            raise ValueError(f"put({key!r}): give expected_version or if_absent, not both")
        rid = self._new_id()
        msg = KvPut(rid, key, data, expected_version, bool(if_absent), self.incarnation)
        self._queue(now, self._requests.start(now, "put", key, msg, self))
        return rid

    def delete(self, now: float, key: str, *, expected_version: int | None = None) -> int:
        """Delete `key` (NOT_FOUND if it has no live value), optionally only at a version."""
        check_key(key)
        check_version(expected_version)
        rid = self._new_id()
        msg = KvDelete(rid, key, expected_version, self.incarnation)
        self._queue(now, self._requests.start(now, "delete", key, msg, self))
        return rid

    def list_prefix(self, now: float, prefix: str) -> int:
        """List the live records whose keys start with `prefix`, from every shard."""
        check_prefix("list_prefix", prefix)
        rid = self._new_id()
        self._queue(now, self._requests.start(now, "list", prefix, KvList(rid, prefix, 0), self))
        return rid

    def subscribe(self, now: float, target: str, *, prefix: bool = False) -> int:
        """Watch one key (or every key starting with `target`); returns the subscription id.

        Notifications start with the current values (`initial=True`), then every change.
        A completion with op 'subscribe' and rid = the subscription id says when the
        initial values are all in: changes from then on are never missed."""
        if prefix:
            check_prefix("subscribe", target)
        else:
            check_key(target)
        sub_id = self._new_id()
        self._queue(now, self._watches.add(now, sub_id, target, prefix, self._ring, self._view))
        return sub_id

    def unsubscribe(self, now: float, sub_id: int) -> None:
        """Stop a subscription; unknown ids raise KeyError."""
        if sub_id not in self._watches:
            raise KeyError(f"unsubscribe: no subscription with id {sub_id}")
        self._queue(now, self._watches.remove(sub_id, self._ring))

    def drain_completions(self) -> list[Completion]:
        """Take the requests that finished (and subscriptions that started) since the last call."""
        started = [
            Completion(sub_id, "subscribe", target, KvStatus.OK)
            for sub_id, target in self._watches.drain_established()
        ]
        return self._requests.drain() + started

    def drain_notifications(self) -> list[Notification]:
        """Take the subscription notifications ready since the last call, in order."""
        return self._watches.drain()

    def _new_id(self) -> int:
        rid = self._next_id
        self._next_id += 1
        return rid
