"""History checkers name the operations that break each property."""

from __future__ import annotations

import pytest

from zmesh.errors import ActorDiedError, ObjectLostError
from zmesh.testing.history import History, HistoryViolation


def test_a_clean_history_passes_and_counts_outcomes():
    h = History()
    with h.op("put", key="a", value=1) as op:
        op.ok("ref-a")
    with h.op("get", key="a", expected=1) as op:
        op.ok(1)
    with h.op("call", caller="c") as op:
        raise ActorDiedError("actor gone")
    assert h.check(get_bound=30) == {"ops": 3, "ok": 2, "failed": 1, "indeterminate": 0,
                                     "pending": 0}


def test_a_wrong_value_is_reported_with_its_operation():
    h = History()
    with h.op("get", key="x", expected=41) as op:
        op.ok(42)
    with pytest.raises(HistoryViolation) as err:
        h.check()
    (v,) = err.value.violations
    assert v.checker == "values" and v.ops[0].key == "x"
    assert "returned 42, expected 41" in str(err.value)


def test_calls_that_took_effect_out_of_submission_order_are_named():
    h = History()
    ops = [h.invoke("call", caller="c1") for _ in range(3)]
    ops[0].ok(applied=1)
    ops[1].ok(applied=3)
    ops[2].ok(applied=2)
    other = h.invoke("call", caller="c2")
    other.ok(applied=0)  # another caller's order is its own
    (v,) = h.violations()
    assert v.checker == "per_caller_order" and v.ops == [ops[1], ops[2]]


def test_at_least_and_at_most_once_count_effects_against_retries():
    h = History()
    acked, lost, twice, failed = (h.invoke("incr", retries=r) for r in (0, 0, 3, 0))
    acked.ok()
    lost.ok()
    twice.ok()
    failed.fail(ActorDiedError("gone"))
    h.record_effects([acked.id, twice.id, twice.id, failed.id])
    found = {(v.checker, v.ops[0].id) for v in h.violations(at_least_once=True,
                                                             at_most_once=True)}
    assert found == {("at_least_once", lost.id), ("at_most_once", twice.id),
                     ("at_most_once", failed.id)}
    # Without at-most-once, two effects are within twice's 4 tries, but not within one.
    h.record_effects({acked.id: 1})
    found = {(v.checker, v.ops[0].id) for v in h.violations(at_least_once=True)}
    assert found == {("at_least_once", lost.id), ("retries", acked.id)}


def test_a_failed_get_of_an_acknowledged_put_is_a_violation_unless_every_copy_died():
    h = History()
    h.invoke("put", key="k").ok("ref")
    h.invoke("get", key="k").fail(ObjectLostError("gone"))
    (v,) = h.violations()
    assert v.checker == "puts_survive" and [o.kind for o in v.ops] == ["put", "get"]
    assert h.violations(lost={"k"}) == []


def test_gets_must_resolve_within_the_bound():
    h = History()
    slow = h.invoke("get", key="a")
    never = h.invoke("get", key="b")
    slow.ok(1)
    slow.completed = slow.invoked + 31
    found = h.violations(get_bound=30, now=never.invoked + 40)
    assert [(v.checker, v.ops[0]) for v in found] == [("get_bound", slow), ("get_bound", never)]
    assert "never completed" in str(found[1])


def test_undocumented_errors_are_violations_and_timeouts_are_indeterminate():
    h = History()
    op = h.invoke("get")
    op.fail(KeyError("oops"))
    with h.op("get") as timed:
        raise TimeoutError("slow")
    assert timed.status == "indeterminate"
    (v,) = h.violations()
    assert v.checker == "documented_errors" and v.ops == [op]
    with pytest.raises(ValueError), h.op("get"):  # a bug in the program escapes
        raise ValueError("bug")


def test_an_op_completes_once():
    h = History()
    op = h.invoke("get")
    op.ok(1)
    with pytest.raises(RuntimeError, match="completed twice"):
        op.fail(ObjectLostError("x"))
