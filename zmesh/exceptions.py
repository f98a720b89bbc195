"""Public exceptions, under zmesh's names and Ray's (`RayTaskError`, `RayActorError`, ...)."""

from __future__ import annotations

from zmesh.errors import (
    ActorDiedError,
    ActorError,
    ActorUnavailableError,
    GetTimeoutError,
    NodeDiedError,
    ObjectLostError,
    ObjectStoreFullError,
    OutOfMemoryError,
    OwnerDiedError,
    PendingCallsLimitExceeded,
    PlacementGroupError,
    ProtocolError,
    RuntimeEnvSetupError,
    SerializationError,
    TaskCancelledError,
    WorkerCrashedError,
    ZmeshError,
    ZmeshSystemError,
)
from zmesh.task_error import TaskError

RayError = ZmeshError
RaySystemError = ZmeshSystemError
RayTaskError = TaskError
RayActorError = ActorError
ObjectFetchTimedOutError = GetTimeoutError
ReferenceCountingAssertionError = ObjectLostError
LocalRayletDiedError = NodeDiedError
RaySerializationError = SerializationError

__all__ = [
    "ActorDiedError",
    "ActorError",
    "ActorUnavailableError",
    "GetTimeoutError",
    "LocalRayletDiedError",
    "NodeDiedError",
    "ObjectFetchTimedOutError",
    "ObjectLostError",
    "ObjectStoreFullError",
    "OutOfMemoryError",
    "OwnerDiedError",
    "PendingCallsLimitExceeded",
    "PlacementGroupError",
    "ProtocolError",
    "RayActorError",
    "RayError",
    "RaySerializationError",
    "RaySystemError",
    "RayTaskError",
    "ReferenceCountingAssertionError",
    "RuntimeEnvSetupError",
    "SerializationError",
    "TaskCancelledError",
    "TaskError",
    "WorkerCrashedError",
    "ZmeshError",
    "ZmeshSystemError",
]
