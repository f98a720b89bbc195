"""ObjectRef: a reference to a value that exists (or will) somewhere in the mesh.

A ref names its object and its owner's address. Creating and dropping refs keeps the
owner's reference count, so the value is freed everywhere once the last ref is gone.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Generator
from typing import Any

from zmesh.runtime import context


class ObjectRef:
    """A handle on a remote value; pass it to tasks, `get` it, `wait` on it."""

    __slots__ = ("id", "owner", "_client", "__weakref__")

    def __init__(self, object_id: bytes, owner: str, client: Any) -> None:
        self.id = object_id
        self.owner = owner
        self._client = client
        client.objects.incref(object_id, owner)

    def __del__(self) -> None:
        client = self._client
        if client is not None and not client.closed:
            try:
                client.objects.decref(self.id)
            except Exception:  # interpreter shutdown: the table may already be gone
                pass

    def __reduce__(self) -> tuple[Any, ...]:
        context.note_serialized_ref(self)
        return (_restore_ref, (self.id, self.owner))

    def __copy__(self) -> ObjectRef:
        """Another counted ref to the same object (no pickling: nothing is pinned)."""
        return ObjectRef(self.id, self.owner, self._client)

    def __deepcopy__(self, memo: dict[int, Any]) -> ObjectRef:
        return ObjectRef(self.id, self.owner, self._client)

    def hex(self) -> str:
        """The object id in hex, as Ray prints it."""
        return self.id.hex()

    def binary(self) -> bytes:
        """The object id as bytes."""
        return self.id

    def task_id(self) -> bytes:
        """The id of the task that makes this object."""
        return self.id[:-4]

    def __repr__(self) -> str:
        return f"ObjectRef({self.id.hex()})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ObjectRef) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def future(self) -> concurrent.futures.Future[Any]:
        """A concurrent.futures.Future resolved with the value (or its error)."""
        return self._client.future_of(self)  # type: ignore[no-any-return]

    def __await__(self) -> Generator[Any, None, Any]:
        import asyncio  # only awaiting needs it; most processes never do

        return asyncio.wrap_future(self.future()).__await__()


def _restore_ref(object_id: bytes, owner: str) -> ObjectRef:
    client = context.current_client()
    ref = ObjectRef(object_id, owner, client)
    context.note_deserialized_ref(ref)
    return ref
