"""An owner's answer to `zmesh memory`: the references it holds, by kind, as Ray's
`ray memory` shows them.

A process's object table knows why each object is alive there: a local ref in user code,
a pending task that was given it, other processes borrowing it, or being captured inside
another object. `zmesh memory` asks every driver and worker (through the `refs` query, on
their authenticated sockets) and joins the answers with the stores' listings.
"""

from __future__ import annotations

import os
from typing import Any

import msgspec

from zmesh.protocol.messages import runtime as m
from zmesh.runtime.owner.objects import ObjectTable

#: Ray's names for why a reference is alive
LOCAL, PENDING, BORROWED, CAPTURED = ("LOCAL_REFERENCE", "USED_BY_PENDING_TASK",
                                      "BORROWED", "CAPTURED_IN_OBJECT")


def describe(objects: ObjectTable, address: str, kind: str) -> dict[str, Any]:
    """This process's references: one row per object it tracks, with the kinds that keep
    it alive here."""
    rows = []
    with objects.lock:
        records = dict(objects.core.records)
        captured = {inner for r in records.values() for inner in r.contained}
        for oid, r in records.items():
            kinds = ([LOCAL] if r.local else []) + ([PENDING] if r.submitted else []) + (
                [BORROWED] if r.borrowers else []) + (
                [CAPTURED] if r.escaped or oid in captured or r.held else [])
            rows.append({"object_id": oid.hex(), "owner": r.owner, "owned": r.owned,
                         "local": r.local, "submitted": r.submitted,
                         "borrowers": sorted(r.borrowers or ()), "kinds": kinds})
    return {"address": address, "kind": kind, "pid": os.getpid(), "refs": rows}


def answer(objects: ObjectTable, address: str, kind: str, msg: m.Query) -> m.QueryReply:
    """The reply to a `refs` query (any other query is refused by name)."""
    if msg.what != "refs":
        return m.QueryReply(request_id=msg.request_id, data=b"",
                            error=f"a {kind} answers only 'refs' queries, not {msg.what!r}")
    data = msgspec.msgpack.encode(describe(objects, address, kind))
    return m.QueryReply(request_id=msg.request_id, data=data)
