"""A reader keeps its pin after the last view dies (get_large: no round trip on the next get)
and gives it back when the node asks, at once if idle, else when the last view dies."""

from __future__ import annotations

from zmesh.runtime.owner.pins import PinCache


def cache(limit: int = 32) -> tuple[PinCache[str], list[bytes]]:
    unpinned: list[bytes] = []
    return PinCache(unpinned.append, idle_limit=limit), unpinned


def test_a_second_read_reuses_the_kept_pin_without_asking_the_node():
    pins, unpinned = cache()
    assert pins.take(b"a") is None  # first read: pin with the node
    pins.add(b"a", "loc-a")
    pins.released(b"a")
    assert unpinned == [] and pins.idle() == [b"a"]
    assert pins.take(b"a") == "loc-a"
    assert pins.idle() == []
    pins.released(b"a")
    assert unpinned == []


def test_the_node_asking_back_an_idle_pin_unpins_it_at_once():
    pins, unpinned = cache()
    pins.add(b"a", "loc-a")
    pins.released(b"a")
    pins.give_back([b"a", b"unknown"])
    assert unpinned == [b"a"] and pins.take(b"a") is None


def test_a_busy_pin_asked_back_goes_back_when_its_last_view_dies():
    pins, unpinned = cache()
    pins.add(b"a", "loc-a")
    assert pins.take(b"a") == "loc-a"  # two views
    pins.give_back([b"a"])
    assert unpinned == [] and pins.take(b"a") is None  # no new view on a pin going back
    pins.released(b"a")
    assert unpinned == []
    pins.released(b"a")
    assert unpinned == [b"a"]


def test_two_pins_taken_at_once_keep_one():
    pins, unpinned = cache()
    pins.add(b"a", "loc-a")
    pins.add(b"a", "loc-a")  # another thread pinned it before the first add
    assert unpinned == [b"a"]
    pins.released(b"a")
    pins.released(b"a")
    assert unpinned == [b"a"] and pins.idle() == [b"a"]


def test_idle_pins_are_bounded_oldest_first():
    pins, unpinned = cache(limit=2)
    for oid in (b"a", b"b", b"c"):
        pins.add(oid, oid.decode())
        pins.released(oid)
    assert unpinned == [b"a"] and pins.idle() == [b"b", b"c"]
    pins.give_back_idle()
    assert unpinned == [b"a", b"b", b"c"]
