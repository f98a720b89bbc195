"""Runtime messages (tags 20-79): clients and nodes, owners and workers, actors and objects.

Values travel as `Value`: small ones inline as packed bytes, large ones as a `StoreLoc` into
the node's memory-mapped store. Fields follow SCHEMA.md: new fields go last, with defaults.
"""

from __future__ import annotations

import msgspec

from zmesh.protocol.messages.base import Message


class StoreLoc(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """Where an object's packed bytes lie in a node's store.

    `owner`: the address of the object's owner (set by the node that stored it), so that a
    node that pulls a copy for a reader frees that copy when the owner dies.
    """

    node: str
    segment: str
    offset: int
    size: int
    object_id: bytes = b""
    owner: str = ""


class Value(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """A serialized value: inline packed bytes, or a location in a node's store."""

    data: bytes = b""
    loc: StoreLoc | None = None
    is_error: bool = False


class Args(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """Call arguments: packed (args, kwargs) with placeholders, and the top-level refs' values."""

    data: bytes = b""
    refs: list[Value] = []


# -- client <-> node -----------------------------------------------------------------------
class RegisterClient(Message, tag=20):
    """A driver or worker announces itself to its node."""

    address: str
    kind: str
    pid: int
    worker_id: bytes
    job_id: str = ""
    log_to_driver: bool = True


class ClientRegistered(Message, tag=21):
    """The node's answer to RegisterClient: who it is and where its store lives."""

    node_id: str
    node_address: str
    store_dir: str
    job_id: str
    pid: int = 0  # the node's process: a client on the same machine watches it


class ExportFunction(Message, tag=22):
    """A pickled function or class, kept by the node for workers that need it."""

    fn_id: bytes
    blob: bytes


class RequestLease(Message, tag=23):
    """An owner asks for a worker to run tasks of one resource shape."""

    request_id: int
    owner: str
    resources: dict[str, float]
    name: str
    strategy: bytes = b""
    labels: dict[str, str] = {}  # the node's labels must match these exactly


class LeaseGranted(Message, tag=24):
    """A worker is leased to the owner until it returns the lease."""

    request_id: int
    lease_id: bytes
    worker_address: str
    gpu_ids: list[int] = []


class LeaseFailed(Message, tag=25):
    """A lease cannot be granted: `error` is a packed exception."""

    request_id: int
    error: bytes


class ReturnLease(Message, tag=26):
    """The owner gives a leased worker back to the node (or its node does, for an owner
    that died: then the worker may still run the owner's tasks and is stopped). `retire`:
    the worker ran its max_calls and must exit rather than serve again."""

    lease_id: bytes
    owner_died: bool = False
    retire: bool = False


class RevokeLease(Message, tag=27):
    """The node asks an owner to return an idle lease because others wait."""

    lease_id: bytes


class CreateActor(Message, tag=28):
    """Start an actor: from its owner to the node, then from the node to the chosen worker."""

    actor_id: bytes
    owner: str
    fn_id: bytes
    class_name: str
    args: Args
    resources: dict[str, float]
    placement: dict[str, float]
    name: str = ""
    namespace: str = ""
    detached: bool = False
    max_restarts: int = 0
    max_concurrency: int = 1
    is_async: bool = False
    env_vars: dict[str, str] = {}
    strategy: bytes = b""
    get_if_exists: bool = False
    fn_blob: bytes = b""
    gpu_ids: list[int] = []
    restarts: int = 0
    labels: dict[str, str] = {}  # the node's labels must match these exactly
    concurrency_groups: dict[str, int] = {}  # group name -> calls it may run at once
    max_pending_calls: int = -1  # per handle, every handle (-1: no limit)
    # What a handle got by name must know (named actors only; handles passed as values
    # carry it themselves): each method's num_returns (the wire form), the actor's
    # max_task_retries, and the methods' retry options (ActorHandle._method_opts, pickled)
    methods: dict[str, int] = {}
    max_task_retries: int = 0
    method_opts: bytes = b""


class ActorState(Message, tag=29):
    """An actor's state changed: alive at `address`, restarting, or dead with `error`.

    `call_address`, when set (with state "alive"), is where the actor's worker takes its
    calls: a sync actor's executor thread receives them on an endpoint of its own
    (`runtime/worker/actor_inbox.py`); everything else still goes to `address`."""

    actor_id: bytes
    state: str
    address: str = ""
    error: bytes = b""
    reason: str = ""
    class_name: str = ""
    restarts: int = 0
    call_address: str = ""


class KillActor(Message, tag=30):
    """Kill an actor's worker; with no_restart it stays dead. `reason` is what its callers
    read ("" : it was killed by zmesh.kill())."""

    actor_id: bytes
    no_restart: bool = True
    reason: str = ""


class GetNamedActor(Message, tag=31):
    """Look up a named actor in a namespace."""

    request_id: int
    name: str
    namespace: str


class NamedActorReply(Message, tag=32):
    """The answer to GetNamedActor: the actor's id and class name, or found=False."""

    request_id: int
    found: bool
    actor_id: bytes = b""
    class_name: str = ""
    address: str = ""
    state: str = ""
    fn_id: bytes = b""
    is_async: bool = False
    owner: str = ""  # the creator, which counts the actor's handles (non-detached actors)
    detached: bool = False
    max_pending_calls: int = -1
    max_concurrency: int = 1
    methods: dict[str, int] = {}  # as CreateActor's: what the handle needs to call them
    max_task_retries: int = 0
    method_opts: bytes = b""


class WorkerExited(Message, tag=33):
    """A leased worker died: whatever ran on it failed with `reason`. `request_id`: the
    owner's request the lease answered (-1: not said, from an older node), so that an owner
    that never had the grant asks again rather than wait for it."""

    lease_id: bytes
    worker_address: str
    reason: str
    request_id: int = -1


class AllocObject(Message, tag=34):
    """Reserve space in the node's store for an object of `size` bytes."""

    request_id: int
    object_id: bytes
    size: int
    owner: str  # the writer (its unsealed objects go when it dies)
    for_owner: str = ""  # the object's owner when not the writer (a task's caller)


class AllocReply(Message, tag=35):
    """Where to write the object, or an error (packed exception)."""

    request_id: int
    loc: StoreLoc | None = None
    error: bytes = b""


class SealObject(Message, tag=36):
    """The object's bytes are written; readers may map it."""

    object_id: bytes


class FreeObjects(Message, tag=37):
    """The last references to these objects are gone: free every copy.

    `node`: the id of the node holding their primary copies when that is not the node this
    goes to (a task's return made on another node); the receiving node forwards it there.
    """

    object_ids: list[bytes]
    node: str = ""


class Blocked(Message, tag=38):
    """A worker waits in get: the node lends its CPU out meanwhile."""

    worker: str
    blocked: bool


class LogLines(Message, tag=39):
    """Lines a worker printed, prefixed the way Ray prints them."""

    prefix: str
    lines: list[str]
    stderr: bool = False


class Query(Message, tag=40):
    """Ask the node for state: resources, nodes, placement groups, actors."""

    request_id: int
    what: str
    arg: bytes = b""


class QueryReply(Message, tag=41):
    """The answer to Query, msgpack-encoded."""

    request_id: int
    data: bytes
    error: str = ""


class CreatePlacementGroup(Message, tag=42):
    """Reserve bundles atomically with a strategy."""

    pg_id: bytes
    bundles: list[dict[str, float]]
    strategy: str
    name: str = ""
    owner: str = ""
    detached: bool = False


class PlacementGroupState(Message, tag=43):
    """A placement group is ready, pending (with why), or removed."""

    pg_id: bytes
    state: str
    reason: str = ""


class RemovePlacementGroup(Message, tag=44):
    """Release a placement group and stop what runs in it."""

    pg_id: bytes


class DriverWarning(Message, tag=45):
    """A warning for the user: infeasible work, for example; `subject` names the work."""

    text: str
    subject: str = ""


class SubscribeActor(Message, tag=46):
    """Send me ActorState for this actor now and whenever it changes."""

    actor_id: bytes
    subscriber: str


class Shutdown(Message, tag=47):
    """Ask the receiver to exit cleanly."""

    reason: str = ""


class WorkerReady(Message, tag=48):
    """A freshly started worker is connected and ready for work."""

    address: str
    pid: int
    worker_id: bytes


# -- owner <-> worker ----------------------------------------------------------------------
class ExecuteTask(Message, tag=50):
    """Run a task on a leased worker; results go to `owner`."""

    task_id: bytes
    owner: str
    fn_id: bytes
    name: str
    args: Args
    num_returns: int = 1
    fn_blob: bytes = b""
    env_vars: dict[str, str] = {}
    attempt: int = 0
    ref_ids: list[bytes] = []  # ids of args.refs, given when some are pending (empty Values)
    namespace: str = ""  # the submitter's namespace: get_actor inside the task looks there
    resources: dict[str, float] = {}  # what the task holds, for get_assigned_resources()
    backpressure: int = 0  # a streaming generator pauses with this many items unconsumed
    strategy: bytes = b""  # how it was placed: its placement group, for its own children


class Lent(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """A ref inside return `index` of a task result, to an object that `owner` owns (not
    the worker that sent it): the caller keeps it while that return lives."""

    index: int
    object_id: bytes
    owner: str


class TaskResult(Message, tag=51):
    """A task or actor call finished: one Value per return (errors as error Values)."""

    task_id: bytes
    returns: list[Value]
    borrowed: list[bytes] = []
    contained: list[bytes] = []  # the sender's objects inside the returns; the caller borrows
    attempt: int = 0  # the task's attempt it answers (a late or repeated answer of an
    # earlier attempt must not count for a later one)
    lent: list[Lent] = []  # refs to others' objects inside the returns (see HandOffBorrow)


class ActorCall(Message, tag=52):
    """Call a method on an actor; calls from one caller run in `seq` order."""

    actor_id: bytes
    caller: str
    seq: int
    task_id: bytes
    method: str
    args: Args
    num_returns: int = 1
    backpressure: int = 0  # a streaming generator pauses with this many items unconsumed
    concurrency_group: str = ""  # "": the method's own group, else the default group
    attempt: int = 0  # retry_exceptions sends a call again under its id: its answer names this


class CancelTask(Message, tag=53):
    """Interrupt a running task (or kill its worker with force)."""

    task_id: bytes
    force: bool = False
    recursive: bool = True  # also cancel the tasks it submitted


# -- borrowers <-> owners ------------------------------------------------------------------
class GetObject(Message, tag=55):
    """Ask an object's owner for its value; the owner answers when it is ready."""

    object_id: bytes
    requester: str


class ObjectValue(Message, tag=56):
    """An object's value for a borrower, or an error Value if it is lost."""

    object_id: bytes
    value: Value


class AddBorrowers(Message, tag=57):
    """The sender holds references to these objects: keep them alive."""

    object_ids: list[bytes]
    borrower: str


class RemoveBorrowers(Message, tag=58):
    """The sender dropped its references to these objects."""

    object_ids: list[bytes]
    borrower: str


class HandOffBorrow(Message, tag=74):
    """Caller -> an object's owner: `lender` (a worker) returned us refs to your objects
    `object_ids` and keeps them for us (lend `token`); we borrow them now (`take`), or we
    refuse them. Register us first, then tell the lender (LendSettled): so at no moment is
    neither of us registered."""

    object_ids: list[bytes]
    borrower: str
    lender: str
    token: bytes
    take: bool


class LendSettled(Message, tag=75):
    """Owner -> a worker that lent refs to its objects: lend `token` of `object_ids` is
    settled (the caller borrows them from the owner, or refused them): stop keeping them."""

    token: bytes
    object_ids: list[bytes]


class NoteBorrow(Message, tag=62):
    """Worker -> an object's owner, before the worker's answer goes: `borrower` (the
    caller) is about to get refs to your objects `object_ids` (in its returns `outers`,
    parallel) through our lend `token`; keep them for it until it hands off (HandOffBorrow)
    or dies. `borrower` being the sender: it keeps them itself past its work (register it).
    Answered by BorrowNoted; the worker's answer waits for that."""

    token: bytes
    object_ids: list[bytes]
    outers: list[bytes]
    borrower: str
    seq: int = 0  # the worker's number of this note (sent again until acknowledged)


class BorrowNoted(Message, tag=63):
    """Owner -> worker: we keep what lend `token` hands over (note `seq`; its answer may go).
    `lost`: of a note registering the worker itself, the objects we did not register it
    for (freed already, or the worker was taken for dead): its refs to them are lost."""

    token: bytes
    seq: int = 0
    lost: list[bytes] = []


class AskHandOff(Message, tag=64):
    """Owner -> caller: `lender` died before you settled its lend `token` of our
    `object_ids` (in your returns `outers`): take them over while those returns live, or
    refuse them, as if its answer had come (HandOffBorrow)."""

    token: bytes
    object_ids: list[bytes]
    outers: list[bytes]
    lender: str


class PinObject(Message, tag=59):
    """A reader maps a stored object: keep it in place (restore it if spilled); AllocReply.

    `source`: where the reader was told the object lies; when that is another node, the
    node pulls a copy from there first and answers with the local location.
    """

    request_id: int
    object_id: bytes
    client: str
    source: StoreLoc | None = None


class UnpinObject(Message, tag=60):
    """The reader dropped every view of the object."""

    object_id: bytes
    client: str


class ReleasePins(Message, tag=76):
    """Node -> a reader: give back the idle pins you keep on these objects (they were
    freed, or the store needs their room); busy ones go back when their last view dies."""

    object_ids: list[bytes]


class NodeDied(Message, tag=61):
    """Node -> its clients: a member of the mesh died or left. Objects owned by processes
    that lived there (`ipc_dir`: the directory of their ipc sockets) fail with
    OwnerDiedError instead of waiting for an owner that will never answer."""

    node_id: str
    address: str
    ipc_dir: str
    why: str


class NodeBack(Message, tag=65):
    """Node -> its clients: a member the node reported dead (`NodeDied`) answers again (it
    was paused or cut off, not dead). It killed its workers when it heard of its death, so
    processes started there from now on are new: owners stop refusing them by `ipc_dir`
    (the processes they knew there stay refused), and owners there are probed again."""

    node_id: str
    address: str
    ipc_dir: str


# -- streaming generators (worker -> owner, owner -> worker) ----------------------------
class GeneratorItem(Message, tag=77):
    """One item a streaming generator task yielded: the value of return `index + 1`."""

    task_id: bytes
    index: int
    value: Value
    worker: str = ""
    lent: list[Lent] = []  # refs to others' objects inside (Lent.index: the item's index)
    contained: list[bytes] = []  # the worker's objects inside; the owner borrows them


class GeneratorItems(Message, tag=79):
    """Items `start`, `start + 1`, ... of a streaming generator, sent together when the
    generator yields faster than one message per item is worth."""

    task_id: bytes
    start: int
    values: list[Value]
    worker: str = ""
    lent: list[Lent] = []  # as GeneratorItem's
    contained: list[bytes] = []


class GeneratorAck(Message, tag=78):
    """The owner has consumed this many items of a generator (for backpressure)."""

    task_id: bytes
    consumed: int
