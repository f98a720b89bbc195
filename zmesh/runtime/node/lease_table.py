"""A worker lease as its node records it: who holds it, on which worker, and whether it was
forwarded to or from another node."""

from __future__ import annotations

from dataclasses import dataclass

from zmesh.protocol.messages import runtime as m
from zmesh.runtime.node.worker_pool import WorkerInfo


@dataclass(eq=False)
class LeaseInfo:
    """One lease request or grant on this node."""

    lease_id: bytes
    owner: str
    request_id: int
    name: str
    worker: WorkerInfo | None = None
    holds: bool = True  # False while its worker is blocked in get and lent its CPU out
    request: m.RequestLease | None = None
    origin: str = ""  # the node that forwarded this lease here (it keeps a record)
    remote: str = ""  # the node this lease was forwarded to (we are its origin)
    remote_granted: bool = False
