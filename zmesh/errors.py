"""The zmesh exception tree; `zmesh.exceptions` re-exports it under Ray's names too.

Every error a user can see derives from `ZmeshError` (alias `RayError`), so one
`except` catches them all; each class says what failed and why in its message.
"""

from __future__ import annotations


class ZmeshError(Exception):
    """Base of every error zmesh raises."""


class ProtocolError(ZmeshError):
    """A frame or message broke the wire protocol: unknown tag, wrong type, bad size.

    Raised by decoding; the receiving loop logs it and drops the frame.
    """


class HandshakeError(ProtocolError):
    """A peer's handshake was refused: wrong protocol version or cluster credential."""


class SerializationError(ZmeshError):
    """A value could not be serialized or deserialized; the message names the type."""


class UntrustedSerializerError(SerializationError):
    """A trusted-only serializer (pickle) was offered by a peer that is not authenticated."""


class TransportError(ZmeshError):
    """A transport could not deliver or accept frames (closed, unreachable, too large)."""


class ZmeshSystemError(ZmeshError):
    """The runtime failed: a process or node it relied on is gone or misbehaved."""


class GetTimeoutError(ZmeshError, TimeoutError):
    """`get` or `wait` ran past its timeout before the object was ready."""


class TaskCancelledError(ZmeshError):
    """The task was cancelled with `cancel` before it finished."""


class PendingCallsLimitExceeded(ZmeshError):
    """More calls to an actor are pending from this handle than its `max_pending_calls`."""


class TaskInterrupt(BaseException):
    """Raised inside a running task's thread by `cancel` (reported as TaskCancelledError). A
    BaseException, so that `except Exception` in user or decoding code does not swallow it."""


class ActorExit(SystemExit):
    """Raised by `zmesh.actor.exit_actor()` (and `__ray_terminate__`): the actor's worker runs
    its atexit handlers and ends for good, without restarting. `why` names the cause."""

    def __init__(self, why: str = "the actor called exit_actor()") -> None:
        super().__init__(why)
        self.why = why


class WorkerCrashedError(ZmeshSystemError):
    """The worker running a task died (signal, exit code) before it finished."""


class ActorError(ZmeshError):
    """An actor could not run a call (Ray: RayActorError)."""


class ActorDiedError(ActorError):
    """The actor is dead: killed, its worker crashed, its owner died, or `__init__` failed."""


class ActorUnavailableError(ActorError):
    """The actor is temporarily unreachable (restarting); the call may be retried."""


class ObjectLostError(ZmeshError):
    """Every copy of an object is gone and it cannot be rebuilt."""


class OwnerDiedError(ObjectLostError):
    """The process that owned the object died, so its value can no longer be found."""


class ObjectStoreFullError(ZmeshError):
    """The object store cannot make room for an object, even by spilling."""


class NodeDiedError(ZmeshSystemError):
    """The node a task, actor or object lived on died."""


class OutOfMemoryError(ZmeshSystemError):
    """A worker was killed because the machine ran out of memory."""


class RuntimeEnvSetupError(ZmeshError):
    """The task's or actor's `runtime_env` could not be set up."""


class PlacementGroupError(ZmeshError):
    """A placement group could not be created, is infeasible, or was removed."""


class TaskUnschedulableError(ZmeshError):
    """A task can never run: its hard node affinity names a dead or unknown node,
    or its placement group was removed (Ray: TaskUnschedulableError)."""


class ActorUnschedulableError(ZmeshError):
    """An actor can never be placed, for the same reasons as TaskUnschedulableError."""


class AuthenticationError(HandshakeError):
    """This process holds no credentials for a mesh, or the mesh refused the ones it holds
    (a wrong or missing join token)."""
