"""The core client every driver and worker runs: ownership, get/put/wait, talking to its node.

User threads call in; the event loop thread owns the socket. Tasks and actor calls are
handled by `TaskSubmitter` and `ActorCaller`, which this client wires to the loop.
"""

from __future__ import annotations

import itertools
import logging
import os
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

from zmesh.core.ownership import BorrowerGone, NodeBack, OwnerNodeDied
from zmesh.errors import (
    NodeDiedError,
    ObjectLostError,
    OwnerDiedError,
    PlacementGroupError,
    ZmeshError,
)
from zmesh.object_ref import ObjectRef
from zmesh.protocol import codec
from zmesh.protocol.messages import runtime as m
from zmesh.runtime import values
from zmesh.runtime.addresses import bind_to_reach, owner_prefix
from zmesh.runtime.ids import IdGen
from zmesh.runtime.loop import EventLoop
from zmesh.runtime.owner import refs_query
from zmesh.runtime.owner.actor_calls import ActorCaller
from zmesh.runtime.owner.lending import Lending
from zmesh.runtime.owner.node_watch import NodeWatch
from zmesh.runtime.owner.objects import ObjectEntry, ObjectTable
from zmesh.runtime.owner.owner_probe import OwnerProbe
from zmesh.runtime.owner.pins import PinCache
from zmesh.runtime.owner.submit import TaskSubmitter
from zmesh.runtime.owner.waiting import Waits
from zmesh.store.mapping import StoreMapper
from zmesh.transports import open_endpoint

logger = logging.getLogger(__name__)

_REQUEST_REPLIES = (m.AllocReply, m.NamedActorReply, m.QueryReply)
_RETURN_0 = IdGen.object_id(b"", 0)  # a task's first return id is its id plus this


class CoreClient:
    """One per process: the driver's or worker's link to the mesh."""

    def __init__(self, node_address: str, session_dir: str, kind: str, *,
                 job_id: str = "", log_to_driver: bool = True, worker_id: bytes | None = None,
                 on_log: Callable[[m.LogLines], None] | None = None,
                 loop: EventLoop | None = None) -> None:
        self.kind = kind
        self.node_address = node_address
        self.node_identity = ""  # the address our node sends from (its mesh address)
        self.session_dir = session_dir
        self.ids = IdGen(worker_id)
        self.worker_id = self.ids.prefix
        self.job_id = job_id
        self.closed = False
        self.out_of_band: set[bytes] = set()  # objects whose refs left through plain pickle
        worker_bind = os.environ.get("ZMESH_WORKER_BIND") if kind == "worker" else None
        # Owners that lived on a node are known by this address prefix when the node dies.
        self.local_prefix = f"ipc://{session_dir}/"
        if loop is not None:  # any transport: the caller bound it (the simulated mesh)
            self.endpoint = loop.endpoint
            self.local_prefix = node_address.rstrip("/") + "/"
        elif worker_bind:  # a worker of a node on a real interface: reachable from elsewhere
            self.endpoint = open_endpoint(worker_bind)
        elif node_address.startswith("tcp://"):
            # A driver that reaches its node over tcp binds tcp too, so remote workers and
            # nodes can answer it: on the interface that routes to the node (addresses.py)
            self.endpoint = open_endpoint(os.environ.get("ZMESH_CLIENT_BIND")
                                          or bind_to_reach(node_address))
        else:
            sock = os.path.join(session_dir,
                                f"{kind}-{os.getpid()}-{self.worker_id.hex()[:8]}.sock")
            self.endpoint = open_endpoint(f"ipc://{sock}")
        self.address = self.endpoint.address
        self.loop = loop if loop is not None else EventLoop(self.endpoint, kind)
        self.objects = ObjectTable(self.address, self.loop.call_soon, self._on_free)
        self.objects.free_needs_loop = self._free_needs_loop
        # object id -> what to run when it is freed (the tensor transport's anchors)
        self.free_hooks: dict[bytes, Callable[[], None]] = {}
        self.tasks = TaskSubmitter(self)
        self.actors = ActorCaller(self)
        self.mapper: StoreMapper | None = None
        self.node_id = ""
        self._map_lock = threading.Lock()
        self.pins: PinCache[Any] = PinCache(self._unpin)  # pins kept while idle (owner/pins.py)
        self._local = threading.local()
        self._requests: dict[int, Future[Any]] = {}
        self._request_ids = itertools.count(1)
        self._registered: Future[m.ClientRegistered] = Future()
        self._on_log = on_log
        self._log_to_driver = log_to_driver
        self.default_env: dict[str, str] = {}
        self.placement_groups: dict[bytes, bytes] = {}
        self.namespace = "default"
        self.assigned_resources: dict[str, float] = {}
        self.current_task_id: bytes = b""
        self.current_actor_id: bytes = b""
        self.waits = Waits(self)
        self.interruptible = self.waits.interruptible  # thread id -> its get/wait, if blocked
        self.current_actor_class: Any = None  # the user's class, in an actor's worker
        self.current_placement_group: Any = None  # the group the running work was placed in
        self.inherited_strategy = b""  # its strategy, when it captures its child tasks
        self.blocked_hook: Callable[[bool], None] | None = None
        self.query_handlers: dict[str, Callable[[str, m.Query], m.QueryReply | None]] = {}
        loop = self.loop
        loop.on(m.ClientRegistered, self._on_registered)
        for reply in _REQUEST_REPLIES:
            loop.on(reply, self._on_reply)
        loop.on(m.GetObject, self._on_get_object)
        loop.on(m.ObjectValue, self._on_object_value)
        loop.on(m.AddBorrowers, lambda s, msg, b: self.objects.add_borrower(msg.object_ids, msg.borrower))
        loop.on(m.RemoveBorrowers,
                lambda s, msg, b: self.objects.remove_borrower(msg.object_ids, msg.borrower))
        loop.on(m.LogLines, self._on_log_lines)
        loop.on(m.DriverWarning, self._on_warning)
        # the node says it stops; what it ran fails through the usual death reports
        loop.on(m.Shutdown, lambda s, msg, b: None)
        loop.on(m.PlacementGroupState, self._on_pg_state)
        loop.on(m.NodeDied, self._on_node_died)
        loop.on(m.NodeBack, self._on_node_back)
        loop.on(m.ReleasePins, lambda s, msg, b: self.pins.give_back(msg.object_ids))
        loop.on(m.Query, self._on_query)
        self.tasks.register(loop)
        self.actors.register(loop)
        self.lending = Lending(self)  # borrowed refs that tasks return (see lending.py)
        self.lending.register(loop)
        self.node_watch = NodeWatch(loop, node_address, self._on_node_lost)
        self.owner_probe = OwnerProbe(self)

    # -- lifecycle -------------------------------------------------------------------------
    def connect(self, timeout: float = 30.0) -> m.ClientRegistered:
        """Register with the node and wait for its answer."""
        self.loop.start_thread()
        self.loop.send_threadsafe(self.node_address, m.RegisterClient(
            address=self.address, kind=self.kind, pid=os.getpid(), worker_id=self.worker_id,
            job_id=self.job_id, log_to_driver=self._log_to_driver))
        try:
            info: m.ClientRegistered = self.loop.wait_future(self._registered, timeout)
        except TimeoutError:
            raise ZmeshError(f"no answer from the zmesh node at {self.node_address} "
                             f"within {timeout:.0f}s") from None
        self.node_id = info.node_id
        self.node_identity = info.node_address
        self.job_id = info.job_id
        self.mapper = StoreMapper(info.store_dir)
        if self.kind == "driver":
            self.loop.call_soon(self.node_watch.start, info.node_id, info.pid)
        return info

    def _on_node_lost(self, why: str) -> None:
        """Our node died (loop thread): what waits on it fails now, naming the node."""
        for fut in list(self._requests.values()):
            if not fut.done():
                fut.set_exception(NodeDiedError(why))
        err = values.encode_error(NodeDiedError(why))
        for oid in list(self.objects.entries):
            self.objects.set_value(oid, err)

    def _on_registered(self, sender: str, msg: m.ClientRegistered, bufs: list[Any]) -> None:
        if not self._registered.done():
            self._registered.set_result(msg)

    def close(self) -> None:
        """Stop the loop and close the socket; refs dropped afterwards are ignored."""
        if self.closed:
            return
        self.pins.give_back_idle()
        self.closed = True
        self.loop.stop()
        if self.loop.thread is not None and self.loop.thread is not threading.current_thread():
            self.loop.thread.join(5)
        self.endpoint.close()
        if self.mapper is not None:
            self.mapper.close()

    def send_direct(self, to: str, msg: Any) -> None:
        """Send from this (non-loop) thread on its own connection, skipping the loop hop.

        Only for messages whose order relative to the loop's own sends does not matter.
        """
        sender: Any = getattr(self._local, "sender", None)
        if sender is None:  # False: this transport has no thread senders
            sender = self._local.sender = self.endpoint.thread_sender() or False
        if sender is False or self.closed:
            self.loop.send_threadsafe(to, msg)
            return
        try:
            sender.send(to, [codec.encode(msg)])
        except Exception:  # TransportError, or no socket to be had (fds): the loop sends it
            self.loop.send_threadsafe(to, msg)

    # -- node requests ---------------------------------------------------------------------
    def request(self, make: Callable[[int], Any], timeout: float | None = 30.0,
                to: str = "") -> Any:
        """Send a request built with a fresh request id to the node (or to the process at
        `to`: another client); wait for its reply."""
        rid = next(self._request_ids)
        fut: Future[Any] = Future()
        self._requests[rid] = fut
        self.loop.send_threadsafe(to or self.node_address, make(rid))
        if self.node_watch.lost:
            raise NodeDiedError(self.node_watch.lost)
        try:
            return self.loop.wait_future(fut, timeout)
        except TimeoutError:
            who = f"the process at {to}" if to else "the zmesh node"
            raise ZmeshError(f"{who} did not answer within {timeout}s") from None
        finally:
            self._requests.pop(rid, None)

    def _on_reply(self, sender: str, msg: Any, bufs: list[Any]) -> None:
        fut = self._requests.get(msg.request_id)
        if fut is not None and not fut.done():
            fut.set_result(msg)

    def query(self, what: str, arg: bytes = b"") -> Any:
        """Ask the node for state (resources, nodes, ...); returns the decoded answer."""
        import msgspec

        reply = self.request(lambda rid: m.Query(request_id=rid, what=what, arg=arg))
        if reply.error:
            raise ZmeshError(reply.error)
        return msgspec.msgpack.decode(reply.data)

    # -- the store -------------------------------------------------------------------------
    def allocate(self, object_id: bytes, size: int, for_owner: str = ""
                 ) -> tuple[m.StoreLoc, memoryview]:
        """Space in the node's store; `for_owner`: the object's owner when it is not this
        process (a task's return), so the node frees it if that owner dies."""
        reply = self.request(lambda rid: m.AllocObject(request_id=rid, object_id=object_id,
                                                       size=size, owner=self.address,
                                                       for_owner=for_owner))
        if reply.error or reply.loc is None:
            err = values.decode(m.Value(data=reply.error, is_error=True), None)
            raise err if isinstance(err, BaseException) else ZmeshError(str(err))
        assert self.mapper is not None
        with self._map_lock:
            return reply.loc, self.mapper.writable(_loc(reply.loc))

    def seal(self, object_id: bytes) -> None:
        self.loop.send_threadsafe(self.node_address, m.SealObject(object_id=object_id))

    def read(self, loc: m.StoreLoc) -> memoryview:
        """Pin a stored object for this process and map it read-only; unpinned when unused."""
        oid = loc.object_id
        kept = self.pins.take(oid)  # a pin this process kept: no round trip
        if kept is not None and self.mapper is not None:
            try:
                with self._map_lock:
                    return self.mapper.readable(kept, lambda: self.pins.released(oid))
            except Exception:
                self.pins.released(oid)
                raise
        # With the location, the node pulls a copy first when it lies on another node.
        reply = self.request(lambda rid: m.PinObject(request_id=rid, object_id=oid,
                                                     client=self.address, source=loc))
        if reply.error or reply.loc is None:
            err = values.decode(m.Value(data=reply.error, is_error=True), None)
            raise err if isinstance(err, BaseException) else ZmeshError(str(err))
        assert self.mapper is not None
        where = _loc(reply.loc)
        self.pins.add(oid, where)
        with self._map_lock:
            return self.mapper.readable(where, lambda: self.pins.released(oid))

    def _unpin(self, object_id: bytes) -> None:
        if not self.closed:
            self.loop.send_threadsafe(self.node_address,
                                      m.UnpinObject(object_id=object_id, client=self.address))

    def encode(self, obj: Any, object_id: bytes, for_owner: str = ""
               ) -> tuple[m.Value, list[ObjectRef]]:
        if not for_owner:
            return values.encode(obj, object_id, allocate=self.allocate, seal=self.seal)
        return values.encode(obj, object_id, seal=self.seal,
                             allocate=lambda oid, size: self.allocate(oid, size, for_owner))

    # -- objects ---------------------------------------------------------------------------
    def make_refs(self, task_id: bytes, n: int) -> list[ObjectRef]:
        """Refs owned by this process for the returns of a task it submits."""
        addr = self.address
        if n <= 1:  # one return (or a generator's, or none): no range, no comprehension
            return [ObjectRef(task_id + _RETURN_0, addr, self)]
        return [ObjectRef(IdGen.object_id(task_id, i), addr, self) for i in range(n)]

    def lookup_named_actor(self, name: str, namespace: str) -> m.NamedActorReply | None:
        """The node's answer for a live named actor (zmesh.actor makes the handle), or None."""
        reply = self.request(lambda rid: m.GetNamedActor(request_id=rid, name=name,
                                                         namespace=namespace))
        return reply if reply.found else None

    def put(self, obj: Any) -> ObjectRef:
        """Store a value owned by this process and return a ref to it."""
        if isinstance(obj, ObjectRef):
            raise TypeError("put() of an ObjectRef is not allowed; pass the ref itself")
        object_id = IdGen.object_id(self.ids.task_id(), 0)
        value, refs = self.encode(obj, object_id)
        ref = ObjectRef(object_id, self.address, self)
        if refs:
            self.objects.hold_contained(object_id, [r.id for r in refs])
        self.objects.set_value(object_id, value)
        return ref

    def get(self, refs: Sequence[ObjectRef], timeout: float | None) -> list[Any]:
        """Values of refs, in order; raises the first error, or GetTimeoutError."""
        deadline = None if timeout is None else self.loop.clock() + timeout
        many = len(refs) > 1
        vals = self.waits.values(refs, deadline, many)
        me = self.address
        if many:
            failed = None
            for v in vals:
                if v is not None and v.is_error:
                    failed = v
                    break
        else:  # one ref (the common case: no generator), or none
            first = vals[0] if vals else None
            if first is not None and first.loc is None and not first.is_error:
                ref = refs[0]  # inline: nothing to read, or to lose
                if ref.owner == me:
                    return [values.decode(first, None)]
                return [self.lending.decode(ref, first, None)]
            failed = first if first is not None and first.is_error else None
        if failed is not None:  # as Ray: the first failure raises without waiting for the rest
            values.raise_if_error(failed, values.decode(failed, self.read))
        # A ref we own decodes as is (what `Lending.decode` does for it, without the call:
        # a batch of owned refs is the common large get); a borrowed one goes through it.
        read, decode, lent_decode = self.read, values.decode, self.lending.decode
        out: list[Any] = []
        append = out.append
        for ref, v in zip(refs, vals):
            try:
                obj = decode(v, read) if ref.owner == me else lent_decode(ref, v, read)
            except ObjectLostError as exc:
                rebuilt = self._rebuild_value(ref, deadline)
                if rebuilt is None:
                    self._raise_if_owner_died(ref, exc, deadline)
                    raise
                v = rebuilt
                obj = lent_decode(ref, v, read)
            append(obj if not v.is_error else values.raise_if_error(v, obj))
        return out

    def _raise_if_owner_died(self, ref: ObjectRef, exc: ObjectLostError,
                             deadline: float | None) -> None:
        """A borrowed copy that cannot be read, whose owner lived on another node: raise
        OwnerDiedError if the ownership core's verdict is that the owner died."""
        entry = self.objects.entries.get(ref.id)
        if entry is None or entry.owned or isinstance(exc, OwnerDiedError):
            return
        if entry.owner.startswith(self.local_prefix):
            return  # the owner shares our node, which is alive
        verdict = self.owner_probe.verdict(ref.id, deadline)
        if verdict is not None and verdict.owner_died:
            raise OwnerDiedError(f"{ref!r} is lost: {verdict.why}") from exc

    def _rebuild_value(self, ref: ObjectRef, deadline: float | None) -> m.Value | None:
        """A new value for a ref whose stored copy was lost, made again by re-running the task
        that made it (lineage) while we own it; None when it cannot be made again."""
        entry = self.objects.entries.get(ref.id)
        if entry is None or not entry.owned or entry.lineage is None:
            return None
        started = threading.Event()

        def rebuild() -> None:
            self.tasks.rebuild(ref.id)
            started.set()

        self.loop.call_soon(rebuild)
        self.loop.wait_event(started, None)
        if self.objects.value_of(ref.id) is not None:
            return None  # no retries left: the task was not run again
        return self._wait_values([ref], deadline)[0]

    # -- waiting (owner/waiting.py) -------------------------------------------------------
    def _wait_values(self, refs: Sequence[ObjectRef], deadline: float | None,
                     fail_fast: bool = False) -> list[m.Value]:
        return self.waits.values(refs, deadline, fail_fast)

    def _request_borrowed(self, refs: Sequence[ObjectRef]) -> None:
        self.waits.request_borrowed(refs)

    def wait(self, refs: Sequence[ObjectRef], num_returns: int, timeout: float | None
             ) -> tuple[list[ObjectRef], list[ObjectRef]]:
        """Split refs into (ready, not ready) once num_returns are ready or time runs out."""
        return self.waits.wait(refs, num_returns, timeout)

    def future_of(self, ref: ObjectRef) -> Future[Any]:
        """A future of the ref's value (it keeps the ref alive until the value comes)."""
        return self.waits.future_of(ref)

    # -- serving objects we own ------------------------------------------------------------
    def _on_get_object(self, sender: str, msg: m.GetObject, bufs: list[Any]) -> None:
        def reply(value: m.Value) -> None:
            self.loop.send(msg.requester, m.ObjectValue(object_id=msg.object_id, value=value))

        if self.objects.core.dropped(msg.requester):  # (taken for dead, it lives on)
            reply(values.encode_error(ObjectLostError(
                f"object {msg.object_id.hex()} is lost to this process: its owner "
                f"{self.address} took it for dead and dropped its borrow")))
            return
        if not self.objects.when_ready(msg.object_id, reply):
            reply(values.encode_error(ObjectLostError(
                f"object {msg.object_id.hex()} was freed: its owner {self.address} holds no "
                "reference to it")))

    def _on_object_value(self, sender: str, msg: m.ObjectValue, bufs: list[Any]) -> None:
        self.objects.set_value(msg.object_id, msg.value)

    def _on_node_died(self, sender: str, msg: m.NodeDied, bufs: list[Any]) -> None:
        # Owners are known by address only: the ones that lived on that node are the node
        # itself and the processes with ipc sockets in its directory.
        prefix = owner_prefix(msg.ipc_dir)
        why = f"its owner lived on node {msg.node_id}, which {msg.why}"
        self.owner_probe.feed(OwnerNodeDied(msg.address, prefix, why))
        # (the owner asks the callers of a dead lender to settle its lends)
        self.lending.carry(self.objects.handle(BorrowerGone(msg.address, prefix)))

    def _on_node_back(self, sender: str, msg: m.NodeBack, bufs: list[Any]) -> None:
        # (a node reported dead answers again; the processes it had then, it killed)
        prefix = owner_prefix(msg.ipc_dir)
        if prefix:
            self.owner_probe.feed(NodeBack(prefix))

    def _free_needs_loop(self, object_id: bytes, entry: ObjectEntry) -> bool:
        """False when `_on_free` would do nothing for this object (an owned inline value)."""
        if not entry.owned or object_id in self.free_hooks or object_id in self.actors.lives:
            return True
        value = entry.value
        return value is not None and value.loc is not None

    def _on_free(self, object_id: bytes, entry: ObjectEntry) -> None:
        hook = self.free_hooks.pop(object_id, None)
        if hook is not None:
            hook()
        if entry.owned and object_id in self.actors.lives:  # an actor's last handle went
            self.actors.out_of_scope(self.actors.lives.pop(object_id))
            return
        if not entry.owned:
            # the owner ignores a borrower it never registered, so this is always safe
            self.loop.send(entry.owner, m.RemoveBorrowers(object_ids=[object_id],
                                                          borrower=self.address))
            return
        value = entry.value
        if value is not None and value.loc is not None:
            self.loop.send(self.node_address, m.FreeObjects(object_ids=[object_id],
                                                            node=value.loc.node))

    def hold_returned(self, sender: str, return_ids: list[bytes], contained: list[bytes]) -> None:
        """The returns hold objects of `sender`: borrow them while the returns live (loop)."""
        refused = self.objects.hold_borrowed(return_ids, contained, sender)
        if refused:
            self.loop.send(sender, m.RemoveBorrowers(object_ids=list(refused),
                                                     borrower=self.address))

    def _on_pg_state(self, sender: str, msg: m.PlacementGroupState, bufs: list[Any]) -> None:
        """Resolve a group's `ready()` ref when the node says it is reserved (or failed)."""
        ready_id = self.placement_groups.get(msg.pg_id)
        if ready_id is None:
            return
        if msg.state == "ready":
            self.objects.set_value(ready_id, values.encode(True, ready_id, allocate=None,
                                                           seal=None)[0])
        elif msg.state == "failed":
            self.objects.set_value(ready_id, values.encode_error(
                PlacementGroupError(msg.reason)))
        else:
            self.tasks.pending_reasons[f"pg:{msg.pg_id.hex()}"] = msg.reason

    def _on_query(self, sender: str, msg: m.Query, bufs: list[Any]) -> None:
        """Another process asks this one (loop thread): 'refs', or what a module registered
        in `query_handlers` (the tensor transport's pairing)."""
        handler = self.query_handlers.get(msg.what)
        if handler is not None:
            reply = handler(sender, msg)
            if reply is not None:  # (None: a notice, such as a tensor push, needs no answer)
                self.loop.send(sender, reply)
            return
        self.loop.send(sender, refs_query.answer(self.objects, self.address, self.kind, msg))

    def _on_warning(self, sender: str, msg: m.DriverWarning, bufs: list[Any]) -> None:
        if msg.subject:
            self.tasks.pending_reasons[msg.subject] = msg.text
            self.actors.pending_reasons[msg.subject] = msg.text
        sys.stderr.write(f"zmesh warning: {msg.text}\n")  # one write: no interleaving

    # -- logs ------------------------------------------------------------------------------
    def _on_log_lines(self, sender: str, msg: m.LogLines, bufs: list[Any]) -> None:
        if self._on_log is not None:
            self._on_log(msg)
            return
        stream = sys.stderr if msg.stderr else sys.stdout
        for line in msg.lines:
            stream.write(f"{msg.prefix} {line}\n")
        stream.flush()


def _loc(loc: m.StoreLoc) -> Any:
    from zmesh.store.arena import Location

    return Location(segment=loc.segment, offset=loc.offset, size=loc.size)
