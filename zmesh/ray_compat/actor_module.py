"""`ray.actor` in Ray-compat mode: the actor class and handle types, and `method`."""

from __future__ import annotations

from zmesh.actor import ActorClass, ActorHandle, ActorMethod, method

__all__ = ["ActorClass", "ActorHandle", "ActorMethod", "method"]
