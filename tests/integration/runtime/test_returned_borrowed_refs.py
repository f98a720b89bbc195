"""A ref that a task or actor call returns although it only borrows it (it got the ref as an
argument, from a call of its own, or in state) is handed over to the caller: the object
lives while any ref to it does, anywhere, and is freed from the store once every ref is
gone. Before, the worker kept its borrow forever (the object stayed stored), and a caller
that dropped a result before it came told the owner to forget it, though it still held the
object another way (a later read failed)."""

from __future__ import annotations

import gc

import numpy as np
from runtime_fixtures import wait_until

from zmesh.runtime import context

MB = 1 << 20


def stored() -> int:
    return int(dict(context.current_client().query("store"))["num_objects"])


def big(v: int) -> np.ndarray:
    return np.full(2 * MB, v, dtype=np.uint8)  # in the store, not inline


def all_freed(before: int) -> bool:
    gc.collect()
    return wait_until(lambda: stored() <= before, timeout=30)


def test_a_task_returning_its_borrowed_argument_frees_it_once_every_ref_is_gone(ray):
    @ray.remote
    def first(box):
        return box[0]

    gc.collect()
    before = stored()
    ref = ray.put(big(1))
    back = ray.get(first.remote([ref]), timeout=60)
    assert back == ref and int(ray.get(back, timeout=60)[0]) == 1
    del ref, back
    assert all_freed(before), stored()


def test_a_ref_nested_deep_in_a_returned_dict_is_freed_with_the_rest(ray):
    @ray.remote
    def wrap(box):
        return {"a": [(box[0], 1)], "b": box[0]}

    gc.collect()
    before = stored()
    ref = ray.put(big(2))
    out = ray.get(wrap.remote([ref]), timeout=60)
    assert int(ray.get(out["a"][0][0], timeout=60)[0]) == 2
    del ref, out
    assert all_freed(before), stored()


def test_an_actor_returning_a_ref_it_was_given_earlier(ray):
    @ray.remote
    class Keeper:
        def __init__(self):
            self.box = None

        def keep(self, box):
            self.box = box

        def give(self):
            ref, self.box = self.box[0], None  # the actor no longer holds it
            return ref

    keeper = Keeper.remote()
    gc.collect()
    before = stored()
    ref = ray.put(big(3))
    ray.get(keeper.keep.remote([ref]), timeout=60)
    del ref  # only the actor's borrow keeps it now: letting go of it before its answer
    gc.collect()  # came would free the object before the driver holds it again
    back = ray.get(keeper.give.remote(), timeout=60)
    for _ in range(3):  # let the hand-off's messages (and any wrong free) land
        ray.get(keeper.keep.remote(None), timeout=60)
    assert int(ray.get(back, timeout=60)[0]) == 3  # ours is the last ref: it still reads
    del back
    assert all_freed(before), stored()
    ray.kill(keeper)


def test_a_ref_owned_by_a_third_process_is_handed_over_and_freed(ray):
    # the actor owns the object; the driver borrows it, a task borrows it from the driver
    # and returns it: the driver then borrows it through the task's return
    @ray.remote
    class Maker:
        def make(self, v):
            return [ray.put(np.full(2 << 20, v, dtype=np.uint8))]

    @ray.remote
    def first(box):
        return box[0]

    maker = Maker.remote()
    gc.collect()
    before = stored()
    box = ray.get(maker.make.remote(4), timeout=60)
    back = ray.get(first.remote(box), timeout=60)
    del box  # now only the ref the task returned holds it
    gc.collect()
    for _ in range(3):  # let the hand-off's messages (and any wrong free) land
        ray.get(first.remote([1]), timeout=60)
    assert int(ray.get(back, timeout=60)[0]) == 4
    del back
    assert all_freed(before), stored()
    ray.kill(maker)


def test_a_worker_returns_a_ref_it_got_from_its_own_call(ray):
    # the task's worker borrows the actor's object (it called the actor itself); the
    # driver never held it before the task returned it
    @ray.remote
    class Maker:
        def make(self, v):
            return [ray.put(np.full(2 << 20, v, dtype=np.uint8))]

    @ray.remote
    def fetch(maker, v):
        return ray.get(maker.make.remote(v))[0]

    maker = Maker.remote()
    gc.collect()
    before = stored()
    back = ray.get(fetch.remote(maker, 5), timeout=60)
    gc.collect()
    for _ in range(3):
        ray.get(fetch.remote(maker, 6), timeout=60)  # (each frees its own object)
    assert int(ray.get(back, timeout=60)[0]) == 5
    del back
    assert all_freed(before), stored()
    ray.kill(maker)


def test_the_same_ref_returned_by_several_tasks(ray):
    @ray.remote
    def first(box):
        return box[0]

    gc.collect()
    before = stored()
    ref = ray.put(big(7))
    outs = [first.remote([ref]) for _ in range(6)]
    backs = ray.get(outs, timeout=60)
    del ref, outs
    gc.collect()
    assert int(ray.get(backs[-1], timeout=60)[0]) == 7
    del backs
    assert all_freed(before), stored()


def test_the_caller_drops_the_outer_result_before_the_inner(ray):
    @ray.remote
    def first(box):
        return [box[0]]

    gc.collect()
    before = stored()
    ref = ray.put(big(8))
    outer = first.remote([ref])
    (inner,) = ray.get(outer, timeout=60)
    del outer, ref
    gc.collect()
    for _ in range(3):
        ray.get(first.remote([1]), timeout=60)
    assert int(ray.get(inner, timeout=60)[0]) == 8
    del inner
    assert all_freed(before), stored()


def test_a_ref_returned_up_through_several_levels_of_tasks(ray):
    @ray.remote
    def level(box, depth):
        if depth == 0:
            return box[0]
        return ray.get(level.remote(box, depth - 1))

    gc.collect()
    before = stored()
    ref = ray.put(big(9))
    back = ray.get(level.remote([ref], 3), timeout=60)
    del ref
    gc.collect()
    assert int(ray.get(back, timeout=60)[0]) == 9
    del back
    assert all_freed(before), stored()


def test_a_result_dropped_before_it_came_does_not_free_what_the_caller_still_holds(ray):
    # the actor owns the object and returns it in a list twice; the driver keeps the first
    # and drops the second call's ref at once: its refusal must not unregister the driver
    @ray.remote
    class Owner:
        def __init__(self):
            self.ref = ray.put(np.full(2 << 20, 10, dtype=np.uint8))

        def box(self):
            return [self.ref]

        def drop(self):
            self.ref = None

        def ping(self):
            return None

    owner = Owner.remote()
    (kept,) = ray.get(owner.box.remote(), timeout=60)
    for _ in range(3):
        owner.box.remote()  # its ref is gone before its answer comes
    # their answers come before this one's (one connection): what the driver told the
    # owner about them went before the next call does
    ray.get(owner.ping.remote(), timeout=60)
    ray.get(owner.drop.remote(), timeout=60)
    gc.collect()
    assert int(ray.get(kept, timeout=60)[0]) == 10
    ray.kill(owner)



def test_a_borrower_that_passes_a_ref_to_an_actor_that_keeps_it(ray):
    # the task borrows the driver's object and gives it to an actor that keeps it: the
    # actor tells the task's worker (its caller), which must keep its borrow for it. Before,
    # the worker let go (its own ref was gone) and the driver freed the object under the
    # actor (ObjectLostError); had the worker kept it, nothing would have released it
    @ray.remote
    class Keeper:
        def __init__(self):
            self.box = None

        def keep(self, box):
            self.box = box

        def total(self):
            return int(ray.get(self.box[0]).sum())

    @ray.remote
    def hand(keeper, box, depth):
        if depth:
            return ray.get(hand.remote(keeper, box, depth - 1))
        return ray.get(keeper.keep.remote(box))

    for depth in (0, 2):  # the task gives it on itself, or through two more tasks
        keeper = Keeper.remote()
        gc.collect()
        before = stored()
        ref = ray.put(np.ones(2 * MB, dtype=np.uint8))
        ray.get(hand.remote(keeper, [ref], depth), timeout=60)
        del ref  # only the actor holds it now
        gc.collect()
        for _ in range(3):  # (each read lets any wrong free land first)
            assert ray.get(keeper.total.remote(), timeout=60) == 2 * MB
        ray.get(keeper.keep.remote(None), timeout=60)
        assert all_freed(before), stored()
        ray.kill(keeper)


def test_a_ref_inside_a_raised_exception_is_handed_over_like_a_returned_one(ray):
    # before, the worker pinned it for good (out-of-band): the object stayed stored
    @ray.remote
    def fail(box):
        raise KeyError(box[0])

    @ray.remote
    class Failer:
        def fail(self, box):
            raise KeyError(box[0])

    failer = Failer.remote()
    for call in (fail.remote, failer.fail.remote):
        gc.collect()
        before = stored()
        ref = ray.put(big(11))
        try:
            ray.get(call([ref]), timeout=60)
        except KeyError as exc:
            inner = exc.args[0]
        del ref
        gc.collect()
        assert int(ray.get(inner, timeout=60)[0]) == 11  # the error's ref still reads
        del inner
        assert all_freed(before), stored()
    ray.kill(failer)


def test_refs_a_generator_yields_are_handed_over_item_by_item(ray):
    # before, the worker kept every ref an item held for good (the objects stayed stored)
    @ray.remote
    def gen(box):
        yield box[0]  # borrowed from the driver
        yield [box[0]]
        yield [ray.put(np.full(2 << 20, 13, dtype=np.uint8))]  # the worker's own

    gc.collect()
    before = stored()
    ref = ray.put(big(12))
    items = [ray.get(r, timeout=60) for r in gen.remote([ref])]
    del ref
    gc.collect()
    assert int(ray.get(items[0], timeout=60)[0]) == 12
    assert int(ray.get(items[1][0], timeout=60)[0]) == 12
    assert int(ray.get(items[2][0], timeout=60)[0]) == 13
    del items
    assert all_freed(before), stored()


def test_refs_inside_the_error_that_ends_a_generator_are_handed_over_too(ray):
    # before, the worker pinned them for good (out-of-band): the objects stayed stored
    @ray.remote
    def gen(box):
        yield 1
        raise KeyError(box[0], ray.put(np.full(2 << 20, 15, dtype=np.uint8)))  # theirs, ours

    gc.collect()
    before = stored()
    ref = ray.put(big(14))
    items = list(gen.remote([ref]))
    assert ray.get(items[0], timeout=60) == 1
    try:
        ray.get(items[1], timeout=60)
    except KeyError as exc:
        theirs, mine = exc.args
    del ref, items
    gc.collect()
    assert int(ray.get(theirs, timeout=60)[0]) == 14  # the error's refs still read
    assert int(ray.get(mine, timeout=60)[0]) == 15
    del theirs, mine
    assert all_freed(before), stored()


def test_a_generator_yielding_refs_a_third_process_owns(ray):
    # each item waits in the generator until the maker acknowledged the worker's note (the
    # maker keeps the object for the driver from then on); they read, and go at the end
    @ray.remote
    class Maker:
        def make(self, v):
            return [ray.put(np.full(2 << 20, v, dtype=np.uint8))]

    @ray.remote
    def gen(maker):
        for v in (16, 17):
            yield ray.get(maker.make.remote(v))[0]  # the maker's: this worker borrows it

    maker = Maker.remote()
    gc.collect()
    before = stored()
    items = [ray.get(r, timeout=60) for r in gen.remote(maker)]
    gc.collect()
    assert [int(ray.get(r, timeout=60)[0]) for r in items] == [16, 17]
    del items
    assert all_freed(before), stored()
    ray.kill(maker)
