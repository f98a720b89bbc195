"""A whole zmesh mesh in one process, on a simulated network and a virtual clock.

    with zmesh.testing.sim_mesh(nodes=3, seed=7) as mesh:
        ref = f.remote(1)                  # the same Ray-style program, unchanged
        mesh.kill_worker()                 # a fault, at virtual time mesh.now
        assert zmesh.get(ref, timeout=30) == 2

The real node, owner (core client) and worker shells run on `SimLoop`s over a `SimNetwork`;
remote functions run inline on kernel threads; one seeded kernel orders everything, so a
run is a function of its seed (and of PYTHONHASHSEED, which orders sets of strings).
Virtual time only moves while the program blocks (`get`, `wait`, ...) or calls `advance` /
`run_until`; a blocked `get` with no timeout that cannot finish raises `SimDeadlock` after
`stall_limit` virtual seconds instead of hanging.

API summary (for fault plans; hosts are node names "n0", "n1", ...):
  mesh.now                                  virtual seconds since the mesh started
  mesh.advance(seconds)                     let the mesh run for that long
  mesh.run_until(pred, timeout) -> bool     run until pred() holds or timeout passes
  mesh.at(t, fn) / mesh.after(dt, fn)       call fn() at a virtual time (a fault schedule)
  mesh.node_names / mesh.workers(node=None) / mesh.actor_ids()   what can be hit
  mesh.kill_worker(address=None)            SIGKILL a worker (None: one picked by the seed)
  mesh.kill_actor(actor)                    SIGKILL the worker hosting an actor (restarts apply)
  mesh.kill_node(name)                      the node and its workers vanish (not "n0")
  mesh.kill_owner(ref_or_address)           kill the worker process that owns a ref
  mesh.pause_node(name) / resume_node(name) SIGSTOP / SIGCONT of the node process
  mesh.partition(set_a, set_b) / heal()     cut links between sets of hosts, restore them
  mesh.link_faults(drop=, duplicate=, delay=, reorder=, kinds=, between=) -> LinkFaults
  mesh.clear_link_faults()                  remove every link fault rule
  mesh.slow_node(name, seconds)             add latency to every message to or from a host
  mesh.faults_injected / mesh.log / mesh.story()   what was done, for a failing test
  mesh.validate()                           the nodes' invariants (and each core's validate())

`faults`: None, or an object with `attach(mesh)`, called once the mesh is up (a fault plan
schedules its faults there with `mesh.at`).
"""

from __future__ import annotations

import itertools
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from zmesh.errors import ZmeshError
from zmesh.runtime import context, ids
from zmesh.runtime.node.server import Node
from zmesh.runtime.owner.client import CoreClient
from zmesh.store.sweep import sweep_dead_owned_dirs, write_owner_file
from zmesh.testing.sim_kernel import Kernel, SimDeadlock, SimKilled, SimProcess
from zmesh.testing.sim_net import LinkFaults, SimLoop, SimNetwork
from zmesh.testing.sim_worker import SimWorkerPool

__all__ = ["LinkFaults", "SimDeadlock", "SimKilled", "SimMesh", "sim_mesh"]

logger = logging.getLogger("zmesh.sim")

SESSION_PREFIX = "zmesh-sim-"
"""A simulated mesh's directory (stores, session files), in /dev/shm or $TMPDIR."""
LOG_LIMIT = 2000


class SimNode:
    """One node of the simulated mesh: its process, its `Node` shell and its pool."""

    def __init__(self, name: str, proc: SimProcess, node: Node, pool: SimWorkerPool) -> None:
        self.name = name
        self.proc = proc
        self.node = node
        self.pool = pool

    @property
    def alive(self) -> bool:
        return self.proc.alive


class SimMesh:
    """Nodes, a driver and workers of one simulated mesh (see the module docstring)."""

    def __init__(self, nodes: int = 3, seed: int = 0, faults: Any = None, *,
                 num_cpus: float = 2.0, resources: dict[str, float] | None = None,
                 object_store_memory: int = 64 << 20, stall_limit: float = 600.0,
                 latency: tuple[float, float] = (0.0002, 0.002)) -> None:
        if nodes < 1:
            raise ValueError(f"a simulated mesh needs at least one node, got nodes={nodes}")
        self.seed = seed
        self.kernel = Kernel(seed, stall_limit=stall_limit)
        self.net = SimNetwork(self.kernel, latency)
        self.faults = faults
        self.n_nodes = nodes
        self.num_cpus = num_cpus
        self.resources = dict(resources or {})
        self.object_store_memory = object_store_memory
        self.nodes: dict[str, SimNode] = {}
        self.processes: list[SimProcess] = []
        self.driver: CoreClient | None = None
        self.faults_injected = 0
        self.stepper: Callable[[], int] | None = None  # set by a fault plan in steps
        self.log: list[tuple[float, str]] = []
        self._pids = itertools.count(1000)
        # stores and session files of every node, removed at close (in RAM where there is
        # some); those of meshes whose process was killed before its close go now
        base = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
        sweep_dead_owned_dirs(base, SESSION_PREFIX)
        self._session = tempfile.mkdtemp(prefix=SESSION_PREFIX, dir=base)
        write_owner_file(self._session)
        self._saved_client: Any = None
        self._started = False

    # -- lifecycle -------------------------------------------------------------------------
    def next_pid(self) -> int:
        return next(self._pids)

    def start(self) -> SimMesh:
        """Start the nodes, join them into one mesh, connect the driver (on n0)."""
        if self.kernel.root is not None and not self.kernel.in_root():
            raise ZmeshError("start the simulated mesh on the thread that made it")
        self._saved_client = context.maybe_client()
        ids.set_id_source(self.kernel.rng.randbytes)
        self._started = True
        first = ""
        for i in range(self.n_nodes):
            name = f"n{i}"
            self.nodes[name] = node = self._make_node(name)
            node.node.start(join=[first] if first else [])
            first = first or node.node.address
        n0 = self.nodes["n0"]
        proc = SimProcess("n0/driver", "n0")
        loop = SimLoop(self.net.bind(f"{n0.node.address}/driver", proc), "driver")
        self.driver = CoreClient(n0.node.address, self._session, "driver", loop=loop)
        proc.client = self.driver
        proc.on_kill.append(self.driver.close)
        self.processes.append(proc)
        self.kernel.root_client = self.driver
        context.set_client(self.driver)
        self.driver.connect()
        if not self.run_until(self._joined, 60.0):
            raise ZmeshError(f"the simulated nodes did not form one mesh (seed {self.seed})")
        self.note("mesh up: " + ", ".join(self.nodes))
        if self.faults is not None:
            self.faults.attach(self)
        return self

    def _make_node(self, name: str) -> SimNode:
        proc = SimProcess(name, name)
        loop = SimLoop(self.net.bind(f"sim://{name}", proc), "node")
        pools: list[SimWorkerPool] = []

        def make_pool(node: Node) -> SimWorkerPool:
            pools.append(SimWorkerPool(self, node, proc))
            return pools[0]

        session = os.path.join(self._session, name)
        os.makedirs(session, exist_ok=True)
        node = Node(session, num_cpus=self.num_cpus, num_gpus=0.0, resources=self.resources,
                    object_store_memory=self.object_store_memory, loop=loop,
                    make_pool=make_pool, rng=self.kernel.rng,
                    store_root=os.path.join(self._session, "stores"))
        if (self.seed + int(name[1:])) % 2:
            # Every simulated node shares one machine, so all pulls would copy store files
            # (same-host copies); half the nodes, by seed, pull in chunks through the faulty
            # network instead, so both paths meet the faults.
            node.objects.transfer.local_root = None
        proc.on_kill.append(lambda: self._node_cleanup(node))
        self.processes.append(proc)
        return SimNode(name, proc, node, pools[0])

    def _node_cleanup(self, node: Node) -> None:
        node.loop.stop()
        try:
            node.pool.close()
            node.objects.close()
            node.store.close()
        finally:
            from zmesh.store.sweep import remove_node_store_dir

            remove_node_store_dir(node.store_dir)
            node.endpoint.close()

    def _joined(self) -> bool:
        live = [n for n in self.nodes.values() if n.alive]
        return all(n.node.mesh is not None and sum(
            1 for r in n.node.mesh.describe() if r["Alive"]) >= len(live) for n in live)

    def close(self) -> None:
        """Every process vanishes; stores and temporary files are removed."""
        if not self._started:
            shutil.rmtree(self._session, ignore_errors=True)
            return
        self._started = False
        try:
            for proc in reversed(self.processes):
                try:
                    self.kernel.kill(proc)
                except Exception:  # noqa: BLE001 - the rest must still go
                    logger.exception("closing simulated process %s failed", proc.name)
            self.kernel.close()
        finally:
            ids.set_id_source(None)
            context.set_client(self._saved_client)
            shutil.rmtree(self._session, ignore_errors=True)

    def __enter__(self) -> SimMesh:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- time ------------------------------------------------------------------------------
    @property
    def now(self) -> float:
        """Virtual seconds since the mesh was made."""
        return self.kernel.now

    def advance(self, seconds: float) -> None:
        """Let the mesh run for `seconds` of virtual time."""
        self.kernel.run_for(seconds)

    def run_until(self, pred: Callable[[], Any], timeout: float) -> bool:
        """Run until `pred()` holds (True) or `timeout` virtual seconds pass (False)."""
        return self.kernel.wait_until(pred, timeout)

    def at(self, t: float, fn: Callable[[], Any]) -> None:
        """Call `fn()` at virtual time `t` (now, if `t` has passed), as the mesh's operator."""
        self.kernel.schedule(t, None, self._as_operator, fn)

    def step(self) -> int:
        """Begin the program's next step under a plan in steps (call it before each
        operation): the plan's faults due at this step fire now. Returns the step number."""
        if self.stepper is None:
            raise ZmeshError("step() drives fault plans in steps; this mesh has none")
        return self.stepper()

    def after(self, dt: float, fn: Callable[[], Any]) -> None:
        """Call `fn()` `dt` virtual seconds from now."""
        self.at(self.now + dt, fn)

    def _as_operator(self, fn: Callable[[], Any]) -> None:
        context.set_client(self.driver)
        fn()

    # -- what can be hit -------------------------------------------------------------------
    @property
    def node_names(self) -> list[str]:
        return list(self.nodes)

    def live_nodes(self) -> list[str]:
        return [name for name, n in self.nodes.items() if n.alive]

    def workers(self, node: str | None = None) -> list[str]:
        """Addresses of live workers (of one node, or of all), in start order."""
        out = []
        for name, n in self.nodes.items():
            if (node is None or name == node) and n.alive:
                out += [p.client.address for _, p in n.pool.live()]
        return out

    def actor_ids(self) -> list[bytes]:
        """Ids of actors running on a live worker now."""
        return [info.actor_id for n in self.nodes.values() if n.alive
                for info, _ in n.pool.live() if info.state == "actor" and info.actor_id]

    # -- faults ----------------------------------------------------------------------------
    def note(self, text: str) -> None:
        """Add a line to the mesh's story (bounded)."""
        self.log.append((self.now, text))
        if len(self.log) > LOG_LIMIT:
            del self.log[: len(self.log) - LOG_LIMIT]

    def story(self, last: int = 60) -> str:
        """The last lines of what happened, one per line, with virtual times."""
        return "\n".join(f"  t={t:9.4f}s {text}" for t, text in self.log[-last:])

    def _fault(self, text: str) -> None:
        self.faults_injected += 1
        self.note(text)

    def _worker(self, address: str) -> tuple[SimNode, Any] | None:
        for n in self.nodes.values():
            for info, proc in n.pool.live():
                if proc.client.address == address:
                    return n, info
        return None

    def kill_worker(self, address: str | None = None) -> str | None:
        """SIGKILL a worker (None: a busy one if any, chosen by the seed); its address."""
        if address is None:
            busy = [a for a in self.workers() if (w := self._worker(a)) is not None
                    and w[1].state in ("leased", "actor")]
            pool = busy or self.workers()
            if not pool:
                return None
            address = self.kernel.rng.choice(pool)
        found = self._worker(address)
        if found is None:
            return None
        node, info = found
        self._fault(f"kill worker {address} ({info.state})")
        node.pool.kill(info)
        return address

    def kill_actor(self, actor: Any) -> bool:
        """SIGKILL the worker hosting `actor` (a handle or id); False if it runs nowhere."""
        actor_id = getattr(actor, "_actor_id", actor)
        for n in self.nodes.values():
            for info, proc in n.pool.live() if n.alive else []:
                if info.state == "actor" and info.actor_id == actor_id:
                    self._fault(f"kill actor {actor_id.hex()[:8]} on {proc.client.address}")
                    n.pool.kill(info)
                    return True
        return False

    def kill_node(self, name: str) -> None:
        """The node and every worker on it vanish (SIGKILL); n0 holds the driver: refused."""
        if name == "n0":
            raise ValueError("n0 hosts the driver; kill another node")
        n = self.nodes[name]
        if not n.alive:
            return
        self._fault(f"kill node {name}")
        n.pool.close()
        self.kernel.kill(n.proc)

    def kill_owner(self, target: Any) -> bool:
        """Kill the worker process that owns a ref (or the worker at an address)."""
        address = getattr(target, "owner", target)
        if self.driver is not None and address == self.driver.address:
            raise ValueError("the driver owns this ref; it is the program under test")
        found = self._worker(address)
        if found is None:
            return False
        node, info = found
        self._fault(f"kill owner {address}")
        node.pool.kill(info)
        return True

    def pause_node(self, name: str) -> None:
        """Freeze the node process (SIGSTOP): its messages and timers wait until resume."""
        n = self.nodes[name]
        if n.alive and not n.proc.paused:
            self._fault(f"pause node {name}")
            n.proc.paused = True

    def resume_node(self, name: str) -> None:
        """Unfreeze a paused node (SIGCONT)."""
        n = self.nodes[name]
        if n.proc.paused:
            self.note(f"resume node {name}")
            self.kernel.resume(n.proc)

    def partition(self, side_a: Iterable[str], side_b: Iterable[str]) -> None:
        """Cut every link between the hosts of `side_a` and those of `side_b`."""
        a, b = sorted(side_a), sorted(side_b)
        self._fault(f"partition {a} | {b}")
        self.net.partition(a, b)

    def heal(self) -> None:
        """Restore every cut link."""
        self.note("heal")
        self.net.heal()

    def link_faults(self, *, drop: float = 0.0, duplicate: float = 0.0, delay: float = 0.0,
                    reorder: float = 0.0, delay_range: tuple[float, float] = (0.01, 0.5),
                    kinds: Iterable[str] | None = None,
                    between: tuple[Iterable[str], Iterable[str]] | None = None) -> LinkFaults:
        """Add a rule: messages between hosts (matching `kinds` / `between`) are dropped,
        duplicated, delayed or reordered with these probabilities."""
        rule = LinkFaults(drop=drop, duplicate=duplicate, delay=delay, reorder=reorder,
                          delay_range=delay_range,
                          kinds=None if kinds is None else frozenset(kinds),
                          between=None if between is None else
                          (frozenset(between[0]), frozenset(between[1])))
        self._fault(f"link faults {rule}")
        self.net.rules.append(rule)
        return rule

    def clear_link_faults(self) -> None:
        self.note("link faults cleared")
        self.net.rules.clear()

    def slow_node(self, name: str, seconds: float) -> None:
        """Every message to or from host `name` takes `seconds` longer (0: back to normal)."""
        self._fault(f"slow node {name} by {seconds}s")
        if seconds:
            self.net.slow[name] = seconds
        else:
            self.net.slow.pop(name, None)

    # -- invariants ------------------------------------------------------------------------
    def validate(self) -> None:
        """Raise AssertionError when a live node's resources are over-granted or negative,
        or when a core's own `validate()` fails."""
        for name, n in self.nodes.items():
            if not n.alive:
                continue
            sched = n.node.scheduler
            total, free = sched.total(), sched.available()
            for key, amount in free.items():
                cap = total.get(key, 0.0)
                if amount < -1e-9 or amount > cap + 1e-9:
                    raise AssertionError(f"{name}: {key} available {amount} outside [0, {cap}]"
                                         f" (t={self.now:.3f}s, seed {self.seed})")
            for obj in _cores_of(n.node):
                obj.validate()
        for proc in self.processes:
            if proc.alive and isinstance(proc.client, CoreClient):
                for obj in _cores_of(proc.client):
                    obj.validate()


def _cores_of(shell: Any) -> Iterator[Any]:
    """Objects a shell holds (one level down, and `.core` below them) with a validate()."""
    for value in list(vars(shell).values()):
        for obj in (value, getattr(value, "core", None)):
            if obj is not None and callable(getattr(obj, "validate", None)) \
                    and not isinstance(obj, type):
                yield obj


@contextmanager
def sim_mesh(nodes: int = 3, seed: int = 0, faults: Any = None,
             **options: Any) -> Iterator[SimMesh]:
    """A simulated mesh whose driver is this thread's zmesh client while the block runs."""
    with SimMesh(nodes, seed, faults, **options) as mesh:
        yield mesh
