"""A worker's own refs inside several values of one answer (the returns of a task, a batch of
a generator's items) are listed once for the whole answer, not per value: the caller must
borrow them while ANY of those values lives. Before, only the first value still alive held
them, so dropping it let the worker free an object that a later value still referred to."""

from __future__ import annotations

import gc

import msgspec
from runtime_fixtures import wait_until

from zmesh.protocol.messages import runtime as m
from zmesh.runtime import context


def held_by(address: str) -> set[str]:
    """The objects (hex ids) the process at `address` still tracks. Asked through the
    driver's loop, so it is answered after every message the loop sent there before (the
    borrower releases of refs this thread dropped)."""
    client = context.current_client()
    reply = client.request(lambda rid: m.Query(request_id=rid, what="refs"), to=address)
    assert not reply.error, reply.error
    return {row["object_id"] for row in msgspec.msgpack.decode(reply.data)["refs"]}


def test_a_ref_in_the_second_return_lives_while_that_return_does(ray):
    @ray.remote(num_returns=2)
    def two():
        inner = ray.put(21)  # the worker's own object
        return (inner.id, inner.owner), [inner]

    first, second = two.remote()
    oid, worker = ray.get(first, timeout=60)
    ray.wait([second], timeout=60)
    del first  # (the first return holds no ref; the second does)
    gc.collect()
    assert oid.hex() in held_by(worker), "freed under the second return's ref"
    assert ray.get(ray.get(second, timeout=60)[0], timeout=60) == 21
    del second
    gc.collect()
    assert wait_until(lambda: oid.hex() not in held_by(worker), timeout=30)


def test_refs_in_a_batch_of_generator_items_live_while_their_own_item_does(ray):
    n = 200  # items follow each other fast: they share messages (up to 64 a message)

    @ray.remote
    def gen():
        refs = [ray.put(i) for i in range(n)]  # the worker's own objects
        yield [r.id for r in refs], refs[0].owner
        for r in refs:
            yield [r]

    items = list(gen.remote())
    ids, worker = ray.get(items[0], timeout=60)
    kept = {i: items[i + 1] for i in range(n) if i % 3 == 2}
    del items  # every other item's ref goes: the first of each batch among them
    gc.collect()
    held = held_by(worker)
    lost = [i for i in kept if ids[i].hex() not in held]
    assert not lost, f"items {lost[:10]}... lost their refs while the items live"
    for i, item in kept.items():
        assert ray.get(ray.get(item, timeout=60)[0], timeout=60) == i
    del kept, item
    gc.collect()
    assert wait_until(lambda: not {oid.hex() for oid in ids} & held_by(worker), timeout=30)


def test_refs_in_an_answer_that_is_retried_are_let_go(ray, tmp_path):
    # the worker lends the caller its own ref inside the first attempt's error; the caller
    # retries instead of keeping that error, so it must say it borrows none of it (before,
    # the worker counted the caller as a borrower for good: the object stayed)
    marker, named = tmp_path / "attempts", tmp_path / "inner"

    @ray.remote(max_retries=1, retry_exceptions=True)
    def flaky(path, named):
        with open(path, "a") as f:
            f.write("x")
        with open(path) as f:
            attempts = len(f.read())
        if attempts < 2:
            inner = ray.put(b"kept by the first attempt")
            with open(named, "w") as f:
                f.write(f"{inner.id.hex()} {inner.owner}")
            raise RuntimeError("first attempt", inner)
        return "done"

    @ray.remote
    class Flaky:
        def __init__(self):
            self.calls = 0
            self.named = ("", "")

        @ray.method(max_task_retries=1, retry_exceptions=True)
        def flaky(self):
            self.calls += 1
            if self.calls < 2:
                inner = ray.put(b"kept by the first attempt")
                self.named = (inner.id.hex(), inner.owner)
                raise RuntimeError("first attempt", inner)
            return "done"

        def inner(self):
            return self.named

    assert ray.get(flaky.remote(str(marker), str(named)), timeout=60) == "done"
    oid, worker = named.read_text().split(" ")
    assert wait_until(lambda: oid not in held_by(worker), timeout=30), \
        f"the task's worker still keeps {oid} for a caller that retried"
    actor = Flaky.remote()
    assert ray.get(actor.flaky.remote(), timeout=60) == "done"
    oid, worker = ray.get(actor.inner.remote(), timeout=60)
    assert wait_until(lambda: oid not in held_by(worker), timeout=30), \
        f"the actor still keeps {oid} for a caller that retried"
