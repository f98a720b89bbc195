"""The simulated network: endpoints and event loops on the kernel's virtual clock.

`SimEndpoint` is an ordinary `Endpoint` whose sends go to `SimNetwork.transmit`, which gives
each message a seeded fate (latency, drop, duplicate, delay, reorder, partition, slow host)
and schedules its delivery as a kernel event. `SimLoop` is the runtime's `EventLoop` with its
clock, timers, posted calls and blocking waits replaced by the kernel's, so the node, owner
and worker shells run on it unchanged. Delivery between two processes is FIFO unless a
reorder fault picks the message.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from zmesh.errors import TransportError
from zmesh.protocol.messages.base import Message
from zmesh.runtime.loop import EventLoop, Waitable
from zmesh.testing.sim_kernel import Kernel, SimProcess
from zmesh.transports.base import Buffer, Endpoint

__all__ = ["LinkFaults", "SimEndpoint", "SimLoop", "SimNetwork"]


@dataclass(frozen=True)
class LinkFaults:
    """Probabilities (per message) of faults on the links it matches.

    `kinds`: message type names (e.g. {"TaskResult"}), None for all. `between`: two sets of
    host names; the rule applies only to messages crossing from one to the other (either
    way), None for every pair of hosts. Messages between processes of one host (a worker and
    its node: ipc in real life) are never faulted.
    """

    drop: float = 0.0
    duplicate: float = 0.0
    delay: float = 0.0  # probability of an extra delay drawn from `delay_range`
    reorder: float = 0.0  # probability that a message may overtake earlier ones
    delay_range: tuple[float, float] = (0.01, 0.5)
    kinds: frozenset[str] | None = None
    between: tuple[frozenset[str], frozenset[str]] | None = None

    def matches(self, src_host: str, dst_host: str, kind: str) -> bool:
        if self.kinds is not None and kind not in self.kinds:
            return False
        if self.between is not None:
            a, b = self.between
            return (src_host in a and dst_host in b) or (src_host in b and dst_host in a)
        return True


class SimNetwork:
    """Routes messages between simulated processes with seeded latency and faults."""

    def __init__(self, kernel: Kernel, latency: tuple[float, float] = (0.0002, 0.002)) -> None:
        self.kernel = kernel
        self.latency = latency
        self.loops: dict[str, SimLoop] = {}
        self.rules: list[LinkFaults] = []
        self.cuts: set[frozenset[str]] = set()  # pairs of hosts that cannot talk
        self.slow: dict[str, float] = {}  # host -> extra seconds per message to or from it
        self._last: dict[tuple[str, str], float] = {}
        self._held: list[tuple[SimProcess, str, str, list[Buffer], str]] = []  # cut links
        self.stats: Counter[str] = Counter()

    def bind(self, address: str, proc: SimProcess) -> SimEndpoint:
        if address in self.loops:
            raise TransportError(f"simulated address {address!r} is already bound")
        return SimEndpoint(self, address, proc)

    # -- faults ----------------------------------------------------------------------------
    def partition(self, side_a: Iterable[str], side_b: Iterable[str]) -> None:
        """Cut every link between hosts of `side_a` and hosts of `side_b` (both ways)."""
        for a in side_a:
            for b in side_b:
                if a != b:
                    self.cuts.add(frozenset((a, b)))

    def heal(self) -> None:
        """Restore every cut link; what was held on them is sent now, in order."""
        self.cuts.clear()
        held, self._held = self._held, []
        for src, src_addr, to, frames, kind in held:
            # a process that died took its unsent messages with it
            if src.alive and to in self.loops:
                self.transmit(src, src_addr, to, frames, kind)

    # -- delivery --------------------------------------------------------------------------
    def transmit(self, src: SimProcess, src_addr: str, to: str, frames: list[Buffer],
                 kind: str) -> None:
        loop = self.loops.get(to)
        if loop is None:
            raise TransportError(f"no simulated endpoint is bound at {to!r}")
        dst = loop.proc
        k = self.kernel
        self.stats["sent"] += 1
        if not dst.alive:
            self.stats["to_dead"] += 1
            return  # like a socket to a vanished process: the bytes go nowhere
        same_host = src.host == dst.host
        if not same_host and frozenset((src.host, dst.host)) in self.cuts:
            # Held until the cut heals, as TCP does over a partition that ends (zmesh sets no
            # ZeroMQ heartbeat that would drop the connection): a cut delays, `drop` loses.
            self.stats["cut"] += 1
            self._held.append((src, src_addr, to, frames, kind))
            return
        lat = k.rng.uniform(*self.latency) if not same_host else self.latency[0]
        lat += self.slow.get(src.host, 0.0) + self.slow.get(dst.host, 0.0)
        copies, fifo = 1, True
        if not same_host:
            for rule in self.rules:
                if not rule.matches(src.host, dst.host, kind):
                    continue
                if rule.drop and k.rng.random() < rule.drop:
                    self.stats["dropped"] += 1
                    return
                if rule.duplicate and k.rng.random() < rule.duplicate:
                    copies += 1
                    self.stats["duplicated"] += 1
                if rule.delay and k.rng.random() < rule.delay:
                    lat += k.rng.uniform(*rule.delay_range)
                    self.stats["delayed"] += 1
                if rule.reorder and k.rng.random() < rule.reorder:
                    fifo = False
                    lat += k.rng.uniform(0.0, 0.05)
                    self.stats["reordered"] += 1
        at = k.now + lat
        pair = (src_addr, to)
        if fifo:
            at = max(at, self._last.get(pair, 0.0))
            self._last[pair] = at
        for _ in range(copies):
            k.schedule(at, dst, loop._deliver, src_addr, frames)


class SimEndpoint(Endpoint):
    """An endpoint on a `SimNetwork`; the kernel delivers its messages, so `recv` never
    returns one (the simulated loop is driven by kernel events instead)."""

    def __init__(self, net: SimNetwork, address: str, proc: SimProcess) -> None:
        self.address = address
        self.net = net
        self.proc = proc
        self.kind = ""  # the type of the message being sent (set by SimLoop.send)
        self._closed = False
        self._track_open()

    @property
    def closed(self) -> bool:
        return self._closed

    def send(self, to: str, frames: Sequence[Buffer]) -> None:
        if self._closed:
            raise TransportError(f"endpoint {self.address!r} is closed; cannot send to {to!r}")
        copied: list[Buffer] = [f if type(f) is bytes else bytes(memoryview(f)) for f in frames]
        self.net.transmit(self.proc, self.address, to, copied, self.kind)

    def recv(self, timeout: float | None = None) -> tuple[str, list[Buffer]] | None:
        if self._closed:
            raise TransportError(f"endpoint {self.address!r} is closed; cannot recv")
        return None

    def wake(self) -> None:
        pass

    def disconnect(self, peer: str) -> None:
        if self._closed:
            raise TransportError(f"endpoint {self.address!r} is closed; cannot disconnect")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.net.loops.get(self.address) is not None and \
                self.net.loops[self.address].endpoint is self:
            del self.net.loops[self.address]
        self._track_closed()


class SimLoop(EventLoop):
    """The runtime's event loop on the kernel: virtual clock, kernel timers and waits."""

    def __init__(self, endpoint: SimEndpoint, name: str) -> None:
        super().__init__(endpoint, name)
        self.sim_endpoint = endpoint
        self.kernel = endpoint.net.kernel
        self.proc = endpoint.proc
        endpoint.net.loops[endpoint.address] = self

    def clock(self) -> float:
        return self.kernel.now

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        self.kernel.schedule(self.kernel.now, self.proc, self._guarded, fn, args)

    def call_later(self, delay: float, fn: Callable[[], Any]) -> None:
        self.kernel.schedule(self.kernel.now + delay, self.proc, self._guarded, fn, ())

    def call_when_idle(self, fn: Callable[[], Any], max_wait: float) -> None:
        # (after the events already due now, messages included: the kernel's order)
        self.kernel.schedule(self.kernel.now, self.proc, self._guarded, fn, ())

    def _guarded(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        if not self._stopping:
            self._guard(fn, args)

    def send(self, to: str, msg: Message, buffers: Sequence[Any] = ()) -> bool:
        self.sim_endpoint.kind = type(msg).__name__
        return super().send(to, msg, buffers)

    def send_threadsafe(self, to: str, msg: Message) -> None:
        self.call_soon(self.send, to, msg)

    def _deliver(self, sender: str, frames: list[Any]) -> None:
        if not self._stopping and not self.sim_endpoint.closed:
            self._dispatch(sender, frames)

    def wait_event(self, event: Waitable, timeout: float | None) -> bool:
        return self.kernel.wait_until(event.is_set, timeout)

    def wait_future(self, fut: Future[Any], timeout: float | None) -> Any:
        if not self.kernel.wait_until(fut.done, timeout):
            raise TimeoutError
        return fut.result(0)

    def wait_for(self, cond: threading.Condition, pred: Callable[[], Any],
                 timeout: float | None) -> bool:
        return self.kernel.wait_until(pred, timeout)

    def start_thread(self) -> None:
        """Nothing to start: the kernel runs this loop's events."""

    def run(self) -> None:
        """Nothing to run: the kernel runs this loop's events."""

    def stop(self) -> None:
        self._stopping = True
