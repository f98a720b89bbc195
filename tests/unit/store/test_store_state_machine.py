"""ObjectStore under random sequences of operations, checked against a model.

Whatever the order of allocate, seal, pin, unpin, free, mark_secondary and release_client:
the arena stays within capacity, pinned objects keep their bytes where they are, only
unpinned secondaries are evicted, and every object read back has the bytes written.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field

from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from zmesh.errors import ObjectStoreFullError
from zmesh.store.arena import PAGE_SIZE, Location, round_up
from zmesh.store.mapping import StoreMapper
from zmesh.store.object_store import ObjectStore

CAPACITY = 16 * PAGE_SIZE
clients = st.sampled_from(["a", "b", "c"])


def pattern(object_id: bytes, size: int) -> bytes:
    return (object_id * (size // len(object_id) + 1))[:size]


@dataclass
class Model:
    size: int
    owner: str
    sealed: bool = False
    secondary: bool = False
    freed: bool = False
    pins: dict[str, int] = field(default_factory=dict)
    pinned_at: Location | None = None


class ObjectStoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.mkdtemp(prefix="zmesh-store-sm-")
        self.store = ObjectStore(
            os.path.join(self.tmp, "store"),
            CAPACITY,
            spill_dir=os.path.join(self.tmp, "spill"),
            segment_size=8 * PAGE_SIZE,
            max_segment_size=8 * PAGE_SIZE,
        )
        self.mapper = StoreMapper(self.store.directory)
        self.model: dict[bytes, Model] = {}
        self.counter = 0

    def teardown(self) -> None:
        stats = self.store.stats()
        event(f"spilled: {stats.spill_count > 0}, restored: {stats.restore_count > 0}")
        event(f"evicted: {stats.evicted_count > 0}")
        self.mapper.close()
        self.store.close()
        leftovers = os.listdir(self.tmp)
        spill_left = os.listdir(os.path.join(self.tmp, "spill")) if "spill" in leftovers else []
        shutil.rmtree(self.tmp, ignore_errors=True)
        assert leftovers in ([], ["spill"]) and spill_left == [], (leftovers, spill_left)

    def live(self) -> list[bytes]:
        return sorted(oid for oid, m in self.model.items() if not m.freed)

    def movable_left(self) -> bool:
        return any(
            m.sealed and not m.pins and not m.freed and not self.store.is_spilled(oid)
            for oid, m in self.model.items()
        )

    def unmovable_bytes(self) -> int:
        return sum(
            round_up(max(m.size, 1))
            for oid, m in self.model.items()
            if (m.pins or not m.sealed) and (m.freed or not self.store.is_spilled(oid))
        )

    def check_full_is_justified(self, size: int) -> None:
        need = round_up(max(size, 1))
        assert need > CAPACITY - self.unmovable_bytes() or not self.movable_left()

    @rule(size=st.integers(0, 6 * PAGE_SIZE), owner=clients)
    def put(self, size: int, owner: str) -> None:
        """allocate + write + seal: the common path, so the store fills with movable objects."""
        oid = self.new_object(size, owner)
        if oid is not None:
            self.store.seal(oid)
            self.model[oid].sealed = True

    @rule(size=st.integers(0, 6 * PAGE_SIZE), owner=clients)
    def allocate(self, size: int, owner: str) -> None:
        self.new_object(size, owner)

    def new_object(self, size: int, owner: str) -> bytes | None:
        self.counter += 1
        oid = self.counter.to_bytes(20, "big")
        try:
            loc = self.store.allocate(oid, size, owner=owner)
        except ObjectStoreFullError:
            event("allocate: store full")
            self.sync_evictions()
            self.check_full_is_justified(size)
            return None
        with self.mapper.writable(loc) as view:
            view[:] = pattern(oid, size)
        self.model[oid] = Model(size, owner)
        self.sync_evictions()
        return oid

    @precondition(lambda self: any(not m.sealed for m in self.model.values()))
    @rule(data=st.data())
    def seal(self, data: st.DataObject) -> None:
        oid = data.draw(st.sampled_from(sorted(o for o, m in self.model.items() if not m.sealed)))
        self.store.seal(oid)
        self.model[oid].sealed = True

    @precondition(lambda self: any(m.sealed and not m.freed for m in self.model.values()))
    @rule(data=st.data(), client=clients)
    def pin(self, data: st.DataObject, client: str) -> None:
        candidates = sorted(o for o, m in self.model.items() if m.sealed and not m.freed)
        self.pin_one(data.draw(st.sampled_from(candidates)), client)

    @precondition(lambda self: self.store.stats().spilled_objects > 0)
    @rule(data=st.data(), client=clients)
    def pin_spilled(self, data: st.DataObject, client: str) -> None:
        """Reading a spilled object restores it (often spilling others)."""
        spilled = sorted(o for o in self.live() if self.store.is_spilled(o))
        self.pin_one(data.draw(st.sampled_from(spilled)), client)

    def pin_one(self, oid: bytes, client: str) -> None:
        m = self.model[oid]
        try:
            loc = self.store.pin(oid, client)
        except ObjectStoreFullError:
            event("pin: store full")
            self.sync_evictions()
            self.check_full_is_justified(m.size)
            return
        view = self.mapper.readable(loc, lambda: None)
        assert bytes(view) == pattern(oid, m.size)
        if m.pins:
            assert loc == m.pinned_at, "a pinned object moved"
        m.pinned_at = loc
        m.pins[client] = m.pins.get(client, 0) + 1
        self.sync_evictions()

    @precondition(lambda self: any(m.pins for m in self.model.values()))
    @rule(data=st.data())
    def unpin(self, data: st.DataObject) -> None:
        pairs = sorted((o, c) for o, m in self.model.items() for c in m.pins)
        oid, client = data.draw(st.sampled_from(pairs))
        self.store.unpin(oid, client)
        self.drop_pin(oid, client, all_of_them=False)

    @precondition(lambda self: any(not m.freed for m in self.model.values()))
    @rule(data=st.data())
    def free(self, data: st.DataObject) -> None:
        oid = data.draw(st.sampled_from(self.live()))
        assert self.store.free(oid)
        m = self.model[oid]
        if m.pins:
            m.freed = True
        else:
            del self.model[oid]

    @precondition(lambda self: any(not m.freed for m in self.model.values()))
    @rule(data=st.data())
    def mark_secondary(self, data: st.DataObject) -> None:
        oid = data.draw(st.sampled_from(self.live()))
        self.store.mark_secondary(oid)
        self.model[oid].secondary = True

    @rule(client=clients)
    def release_client(self, client: str) -> None:
        self.store.release_client(client)
        for oid, m in list(self.model.items()):
            if client in m.pins:
                self.drop_pin(oid, client, all_of_them=True)
            elif m.owner == client and not m.sealed:
                del self.model[oid]

    def drop_pin(self, oid: bytes, client: str, *, all_of_them: bool) -> None:
        m = self.model[oid]
        m.pins[client] -= 1
        if all_of_them or not m.pins[client]:
            del m.pins[client]
        if not m.pins:
            m.pinned_at = None
            if m.freed:
                del self.model[oid]

    def sync_evictions(self) -> None:
        """Only unpinned sealed secondaries may be evicted; they leave the model."""
        for oid in self.store.take_evicted():
            m = self.model.pop(oid)
            assert m.secondary and m.sealed and not m.pins

    @invariant()
    def arena_stays_within_capacity(self) -> None:
        stats = self.store.stats()
        assert stats.used <= stats.segment_bytes <= CAPACITY

    @invariant()
    def store_holds_exactly_the_live_objects(self) -> None:
        for oid, m in self.model.items():
            assert self.store.contains(oid) == (not m.freed)
        assert self.store.stats().num_objects == len(self.live())

    @invariant()
    def pinned_bytes_stay_in_place(self) -> None:
        for oid, m in self.model.items():
            if m.pinned_at is not None:
                with self.mapper.writable(m.pinned_at) as view:
                    assert bytes(view) == pattern(oid, m.size)


ObjectStoreMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=50, deadline=None
)
test_object_store_state_machine = ObjectStoreMachine.TestCase
