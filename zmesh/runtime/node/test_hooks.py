"""Fault-injection hooks of a node started for tests (`--testing`, as `zmesh.testing` does).

Only such a node has them: it wraps its endpoint in the chaos transport and answers three
extra queries, which reach it only through its authenticated control channel:

- `block`: the tcp addresses of peers whose messages are dropped both ways (a cut link);
- `chaos`: fault rates for what this node sends to other nodes (drop, duplicate, delay,
  reorder; optionally only to some peers or for some message kinds);
- `workers`: this node's worker processes (pid, state, actor), so a test can SIGKILL one.

Every other node refuses these queries by name.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

import msgspec

from zmesh.protocol import codec
from zmesh.protocol.messages import all_messages
from zmesh.transports.chaos import ChaosEndpoint

if TYPE_CHECKING:
    from zmesh.runtime.loop import EventLoop
    from zmesh.runtime.node.worker_pool import WorkerInfo

TEST_QUERIES = frozenset(["block", "chaos", "workers"])


class ChaosConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The `chaos` query's argument: fault rates for messages this node sends to peers."""

    drop: float = 0.0
    duplicate: float = 0.0
    reorder: float = 0.0
    delay: float = 0.0  # seconds added to a delayed message
    delay_rate: float = 0.0
    peers: list[str] | None = None  # tcp addresses; None: every peer node
    kinds: list[str] | None = None  # message class names; None: every kind


class TestHooks:
    """The test-only control surface of one node (loop thread only)."""

    def __init__(self, loop: EventLoop, chaos: ChaosEndpoint,
                 workers: dict[str, WorkerInfo], actor_name: Callable[[bytes], str]) -> None:
        self.loop = loop
        self.chaos = chaos
        self.workers = workers
        self.actor_name = actor_name

    def answer(self, what: str, arg: bytes) -> Any:
        if what == "block":  # cut the links to these nodes (both ways)
            self.loop.blocked = frozenset(msgspec.msgpack.decode(arg, type=list[str]))
            return sorted(self.loop.blocked)
        if what == "chaos":
            cfg = msgspec.msgpack.decode(arg, type=ChaosConfig)
            self.configure(cfg)
            return dict(self.chaos.stats)
        if what == "workers":
            return [{"pid": w.pid, "state": w.state, "actor_id": w.actor_id.hex(),
                     "actor_name": self.actor_name(w.actor_id) if w.actor_id else ""}
                    for w in self.workers.values() if w.pid and w.state != "dead"]
        raise KeyError(f"unknown test query {what!r}")

    def configure(self, cfg: ChaosConfig) -> None:
        tags = _tags_of(cfg.kinds) if cfg.kinds is not None else None
        peers = frozenset(cfg.peers) if cfg.peers is not None else None

        def select(to: str, frames: Sequence[Any]) -> bool:
            if not to.startswith("tcp://"):
                return False  # local workers and drivers (ipc) share a machine: no faults
            if peers is not None and to not in peers:
                return False
            if tags is None:
                return True
            try:
                return type(codec.decode(frames[0])) in tags
            except Exception:
                return False

        self.chaos.configure(cfg.drop, cfg.duplicate, (cfg.delay, cfg.delay), cfg.reorder,
                             delay_rate=cfg.delay_rate if cfg.delay > 0 else 0.0,
                             select=select)


def _tags_of(names: list[str]) -> frozenset[type]:
    by_name = {cls.__name__: cls for cls in all_messages()}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        hints = {n: difflib.get_close_matches(n, by_name, 1) for n in unknown}
        raise ValueError("unknown message kinds: " + ", ".join(
            f"{n!r}" + (f" (did you mean {h[0]!r}?)" if h else "") for n, h in hints.items()))
    return frozenset(by_name[n] for n in names)


def refuse(what: str) -> NoReturn:
    """Raise the error a node not started for tests gives to a test query."""
    raise PermissionError(f"the {what!r} query is a fault-injection hook: it exists only in "
                          "nodes started for tests (zmesh.testing, --testing)")
