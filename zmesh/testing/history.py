"""Jepsen-style histories: record each operation's invocation and outcome, then check them.

An operation is invoked, then completes `ok` (with its value), `failed` (with the error: it
did not happen, or the program was told so), or stays `indeterminate` (timed out, or the
outcome could not be known). Checkers read the whole history and name the operations that
break a property, so a failing test says *which* call went wrong:

    history = History()
    with history.op("get", key="x", caller="driver", expected=41) as op:
        op.ok(zmesh.get(ref, timeout=30))
    history.check(per_caller_order=True, get_bound=30.0)    # raises HistoryViolation

`op()` classifies an exception for you: a zmesh error (or one in `History(errors=...)`) is a
definite failure, a timeout is indeterminate, and anything else escapes unrecorded.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from zmesh.errors import GetTimeoutError, ZmeshError

__all__ = ["History", "HistoryViolation", "Op", "Violation"]

Status = Literal["pending", "ok", "failed", "indeterminate"]
_MISSING: Any = object()


@dataclass
class Op:
    """One operation: what was asked (`kind`, `key`, `caller`, `seq`), when, and its outcome.

    `applied` is where the operation took effect, in an order the program can observe (an
    actor's own counter, say); per-caller order is checked on it. `retries` is how many times
    the runtime may run it again.
    """

    id: int
    kind: str
    caller: str
    key: Any = None
    value: Any = None
    seq: int | None = None
    expected: Any = _MISSING
    retries: int = 0
    invoked: float = 0.0
    completed: float | None = None
    status: Status = "pending"
    result: Any = None
    error: BaseException | None = None
    applied: Any = None

    def ok(self, result: Any = None, *, applied: Any = None) -> Any:
        """The operation succeeded with `result`; returns it."""
        self._finish("ok")
        self.result, self.applied = result, applied
        return result

    def fail(self, error: BaseException) -> None:
        """The operation failed definitely, with `error`."""
        self._finish("failed")
        self.error = error

    def indeterminate(self, error: BaseException | None = None) -> None:
        """The outcome is unknown (timed out, connection lost): it may or may not have happened."""
        self._finish("indeterminate")
        self.error = error

    def _finish(self, status: Status) -> None:
        if self.status != "pending":
            raise RuntimeError(f"{self} completed twice (was {self.status}, now {status})")
        self.status = status
        self.completed = time.monotonic()

    @property
    def latency(self) -> float | None:
        return None if self.completed is None else self.completed - self.invoked

    def __str__(self) -> str:
        what = f"#{self.id} {self.caller}:{self.kind}"
        if self.seq is not None:
            what += f"[{self.seq}]"
        if self.key is not None:
            what += f" key={self.key!r}"
        if self.value is not None:
            what += f" value={_short(self.value)}"
        if self.status == "ok":
            return f"{what} -> ok {_short(self.result)}"
        if self.status == "pending":
            return f"{what} -> never completed"
        err = f" {type(self.error).__name__}: {_short(str(self.error), 120)}" if self.error else ""
        lat = f" after {self.latency:.1f}s" if self.latency is not None else ""
        return f"{what} -> {self.status}{err}{lat}"


@dataclass
class Violation:
    """A property broken by `ops`, explained in `message`."""

    checker: str
    message: str
    ops: list[Op] = field(default_factory=list)

    def __str__(self) -> str:
        return "\n".join([f"[{self.checker}] {self.message}"] + [f"    {op}" for op in self.ops])


class HistoryViolation(AssertionError):
    """`History.check` found violations; `.violations` lists them with their operations."""

    def __init__(self, violations: list[Violation]) -> None:
        self.violations = violations
        shown = "\n".join(str(v) for v in violations[:10])
        more = f"\n... and {len(violations) - 10} more" if len(violations) > 10 else ""
        super().__init__(f"{len(violations)} violation(s) in the history:\n{shown}{more}")


class History:
    """Operations of one run, recorded from any thread, and the checkers that read them.

    `errors` are the exception types that count as a definite, documented failure (default:
    every ZmeshError); anything else raised inside `op()` escapes as a bug in the program.
    """

    def __init__(self, errors: tuple[type[BaseException], ...] = (ZmeshError,)) -> None:
        self.errors = errors
        self.ops: list[Op] = []
        self.effects: dict[int, int] = {}
        self._lock = threading.Lock()
        self._seqs: dict[str, int] = {}

    # -- recording -------------------------------------------------------------------------
    def invoke(self, kind: str, *, caller: str = "main", key: Any = None, value: Any = None,
               seq: int | None = None, expected: Any = _MISSING, retries: int = 0) -> Op:
        """Record that `caller` starts an operation; complete it with ok/fail/indeterminate.

        `seq` defaults to the caller's next number (0, 1, ...), its submission order.
        """
        with self._lock:
            if seq is None:
                seq = self._seqs.get(caller, 0)
            self._seqs[caller] = max(self._seqs.get(caller, 0), seq + 1)
            op = Op(len(self.ops), kind, caller, key, value, seq, expected, retries,
                    time.monotonic())
            self.ops.append(op)
        return op

    @contextmanager
    def op(self, kind: str, **fields: Any) -> Iterator[Op]:
        """`invoke` and classify how the block ends: a documented error fails the op, a
        timeout leaves it indeterminate; a block that neither completes nor raises leaves it
        indeterminate too."""
        op = self.invoke(kind, **fields)
        try:
            yield op
        except (GetTimeoutError, TimeoutError) as exc:
            if op.status == "pending":
                op.indeterminate(exc)
        except self.errors as exc:
            if op.status == "pending":
                op.fail(exc)
        else:
            if op.status == "pending":
                op.indeterminate()

    def record_effects(self, counts: Mapping[int, int] | Iterable[int]) -> None:
        """What the final state shows: how many times each op (by id) took effect.

        Pass a mapping op id -> count, or an iterable of op ids (one entry per application).
        """
        if isinstance(counts, Mapping):
            items = dict(counts)
        else:
            items = {}
            for op_id in counts:
                items[op_id] = items.get(op_id, 0) + 1
        with self._lock:
            for op_id, n in items.items():
                self.effects[op_id] = self.effects.get(op_id, 0) + n

    # -- reading ---------------------------------------------------------------------------
    def summary(self) -> dict[str, int]:
        out = {"ops": len(self.ops), "ok": 0, "failed": 0, "indeterminate": 0, "pending": 0}
        for op in self.ops:
            out[op.status] += 1
        return out

    def check(self, *, per_caller_order: bool = True, at_least_once: bool = False,
              at_most_once: bool = False, values: bool = True,
              get_bound: float | None = None, lost: Iterable[Any] = (),
              puts: bool = True, documented_errors: bool = True,
              now: float | None = None) -> dict[str, int]:
        """Run the chosen checkers; raise HistoryViolation naming offending ops, else return
        the summary. `lost`: keys whose every copy and lineage died (a failed get of one is
        allowed)."""
        violations = self.violations(
            per_caller_order=per_caller_order, at_least_once=at_least_once,
            at_most_once=at_most_once, values=values, get_bound=get_bound, lost=lost,
            puts=puts, documented_errors=documented_errors, now=now)
        if violations:
            raise HistoryViolation(violations)
        return self.summary()

    def violations(self, *, per_caller_order: bool = True, at_least_once: bool = False,
                   at_most_once: bool = False, values: bool = True,
                   get_bound: float | None = None, lost: Iterable[Any] = (),
                   puts: bool = True, documented_errors: bool = True,
                   now: float | None = None) -> list[Violation]:
        """Every violation the chosen checkers find (see `check`)."""
        with self._lock:
            ops = list(self.ops)
        checks: list[Callable[[], list[Violation]]] = []
        if values:
            checks.append(lambda: check_values(ops))
        if per_caller_order:
            checks.append(lambda: check_per_caller_order(ops))
        if at_least_once or at_most_once:
            checks.append(lambda: check_delivery(ops, self.effects, at_least_once, at_most_once))
        if puts:
            checks.append(lambda: check_puts_survive(ops, set(lost)))
        if get_bound is not None:
            checks.append(lambda: check_bound(ops, get_bound, now))
        if documented_errors:
            checks.append(lambda: check_documented(ops, self.errors))
        return [v for check in checks for v in check()]


# -- checkers (pure functions over a list of ops) ---------------------------------------------
def check_values(ops: list[Op]) -> list[Violation]:
    """An ok operation that says what it expected returned exactly that."""
    bad = [op for op in ops if op.status == "ok" and op.expected is not _MISSING
           and not _equal(op.result, op.expected)]
    return [Violation("values", f"{op.kind} returned {_short(op.result)}, expected "
                      f"{_short(op.expected)}", [op]) for op in bad]


def check_per_caller_order(ops: list[Op]) -> list[Violation]:
    """Per caller, ok operations that report where they took effect (`applied`) did so in
    the order the caller submitted them (`seq`)."""
    out = []
    by_caller: dict[str, list[Op]] = {}
    for op in ops:
        if op.status == "ok" and op.applied is not None and op.seq is not None:
            by_caller.setdefault(op.caller, []).append(op)
    for caller, mine in by_caller.items():
        mine.sort(key=lambda o: o.seq if o.seq is not None else -1)
        for before, after in zip(mine, mine[1:]):
            if not before.applied < after.applied:
                out.append(Violation(
                    "per_caller_order", f"caller {caller!r} submitted #{before.id} before "
                    f"#{after.id}, but they took effect at {before.applied!r} and "
                    f"{after.applied!r}", [before, after]))
    return out


def check_delivery(ops: list[Op], effects: Mapping[int, int], at_least_once: bool,
                   at_most_once: bool) -> list[Violation]:
    """Against the effects recorded from the final state: every ok op took effect at least
    once; none more than once (at-most-once) or more than it was tried (always)."""
    out = []
    counted = {op.id for op in ops if op.kind != "get"}
    unknown = sorted(set(effects) - {op.id for op in ops})
    if unknown:
        out.append(Violation("delivery", f"effects of operations never invoked: {unknown[:10]}"))
    for op in ops:
        if op.id not in counted:
            continue
        n = effects.get(op.id, 0)
        if at_least_once and op.status == "ok" and n == 0:
            out.append(Violation("at_least_once", "acknowledged but never took effect", [op]))
        if at_most_once and n > 1:
            out.append(Violation("at_most_once", f"took effect {n} times", [op]))
        elif n > op.retries + 1:
            out.append(Violation("retries", f"took effect {n} times but may run at most "
                                 f"{op.retries + 1} (retries={op.retries})", [op]))
        if at_most_once and op.status == "failed" and n > 0:
            out.append(Violation("at_most_once", f"reported failed but took effect {n} "
                                 "time(s)", [op]))
    return out


def check_puts_survive(ops: list[Op], lost: set[Any]) -> list[Violation]:
    """No acknowledged put is lost while a copy or its lineage survives: a get of a key whose
    put was acknowledged fails only if the key is in `lost`."""
    acked = {op.key: op for op in ops if op.kind == "put" and op.status == "ok"}
    out = []
    for op in ops:
        if op.kind == "get" and op.status == "failed" and op.key in acked \
                and op.key not in lost:
            out.append(Violation("puts_survive", f"the put of {op.key!r} was acknowledged and "
                                 "a copy or lineage survives, yet the get failed",
                                 [acked[op.key], op]))
    return out


def check_bound(ops: list[Op], bound: float, now: float | None = None,
                kinds: tuple[str, ...] = ("get", "call")) -> list[Violation]:
    """Every get (and actor call) completed, ok or failed, within `bound` seconds."""
    now = time.monotonic() if now is None else now
    out = []
    for op in ops:
        if op.kind not in kinds:
            continue
        end = op.completed if op.completed is not None else now
        if op.status in ("pending", "indeterminate") or end - op.invoked > bound:
            out.append(Violation("get_bound", f"not resolved within {bound:g}s "
                                 f"({end - op.invoked:.1f}s)", [op]))
    return out


def check_documented(ops: list[Op], errors: tuple[type[BaseException], ...]) -> list[Violation]:
    """Every failed op failed with a documented error type."""
    return [Violation("documented_errors", f"failed with undocumented "
                      f"{type(op.error).__name__}", [op])
            for op in ops if op.status == "failed" and not isinstance(op.error, errors)]


def _equal(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # numpy arrays compare element-wise
        import numpy as np

        return bool(np.array_equal(a, b))


def _short(value: Any, limit: int = 60) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."
