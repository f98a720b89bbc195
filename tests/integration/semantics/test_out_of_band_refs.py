"""Refs serialized "out of band" (plain `pickle`, or captured in a remote function's
closure) keep their object, as Ray's documentation says ("Serialization: Out-of-band
serialization of ObjectRef": Ray pins such objects, since it cannot track where the bytes
go). Before, the object was freed when the last in-process ref went, and a `get` of the
ref rebuilt from the bytes waited forever."""

from __future__ import annotations

import gc
import pickle


def test_a_ref_pickled_by_its_owner_still_gets_its_value(ray):
    data = pickle.dumps(ray.put(3))  # the only ref is gone once dumps returns
    gc.collect()
    assert ray.get(pickle.loads(data), timeout=30) == 3


def test_a_ref_pickled_by_a_borrower_keeps_the_object(ray):
    @ray.remote
    def smuggle(refs):
        return pickle.dumps(refs[0])  # plain pickle in the borrowing worker

    ref = ray.put("kept")
    data = ray.get(smuggle.remote([ref]), timeout=30)
    del ref  # the owner's own ref goes; the borrower's out-of-band hold keeps the object
    gc.collect()
    assert ray.get(pickle.loads(data), timeout=30) == "kept"


def test_a_ref_captured_in_a_remote_functions_closure(ray):
    ref = ray.put([1, 2, 3])

    @ray.remote
    def total():
        return sum(ray.get(ref))  # noqa: F821  (the closure's cell: emptied below, here)

    call = total.remote()  # exporting the function pickles the closure, and the ref in it
    del ref  # the driver's only ref: what the exported code holds must keep the object
    gc.collect()
    assert ray.get(call, timeout=30) == 6
    assert ray.get(total.remote(), timeout=30) == 6


def test_refs_passed_as_arguments_are_still_freed(ray):
    from zmesh.runtime import context

    @ray.remote
    def length(x):
        return len(x)

    client = context.current_client()
    ref = ray.put(b"x" * 1000)
    oid = ref.id
    assert ray.get(length.remote(ref), timeout=30) == 1000
    del ref
    gc.collect()
    assert oid not in client.out_of_band
    assert client.objects.entries.get(oid) is None  # in-band refs: freed when the last goes


def test_copies_of_a_ref_and_inspecting_it_do_not_pin_the_object(ray):
    import copy

    from zmesh.runtime import context
    from zmesh.util import inspect_serializability

    client = context.current_client()
    ref = ray.put(b"y" * 1000)
    oid = ref.id
    shallow, deep = copy.copy(ref), copy.deepcopy({"k": [ref]})
    assert shallow == ref and deep["k"][0] == ref
    assert inspect_serializability({"ref": ref}, name="holder")[0]
    assert ray.get(deep["k"][0], timeout=30) == b"y" * 1000
    del ref
    gc.collect()
    assert ray.get(shallow, timeout=30) == b"y" * 1000  # a copy is a counted ref
    del shallow, deep
    gc.collect()
    assert oid not in client.out_of_band
    assert client.objects.entries.get(oid) is None  # freed with the last copy
