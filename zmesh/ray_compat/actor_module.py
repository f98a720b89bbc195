"""`ray.actor` in Ray-compat mode: the actor class and handle types, `method` and
`exit_actor`."""

from __future__ import annotations

from zmesh.actor import ActorClass, ActorHandle, ActorMethod, exit_actor, method

__all__ = ["ActorClass", "ActorHandle", "ActorMethod", "exit_actor", "method"]
