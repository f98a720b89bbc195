"""The tensor transport on CPU (gloo): tensors stay in the producing actor, move straight
to consumers, reach the driver on `get`, are freed with the last ref, and a consumer of a
dead producer fails clearly; sync, threaded and async actors."""

from __future__ import annotations

import asyncio
import gc
import os

import pytest
from runtime_fixtures import wait_until

import zmesh

torch = pytest.importorskip("torch")


def make_producer(**options):
    """The producer class (defined here: workers cannot import this test module)."""

    class _Producer:
        def __init__(self) -> None:
            self.w = torch.arange(250_000, dtype=torch.float64)

        @zmesh.method(tensor_transport="gloo")
        def weights(self, scale: float = 1.0):
            return {"w": self.w * scale, "step": 7, "parts": [torch.ones(3, dtype=torch.int64)]}

        @zmesh.method(tensor_transport="gloo")
        def many(self, n: int):
            return [torch.full((i + 1,), float(i)) for i in range(n)]

        def kept(self) -> int:
            from zmesh.tensor_transport import kept_count

            return kept_count()

        def sent_bytes(self) -> int:
            from zmesh.tensor_transport.producer import KEPT

            return KEPT.sent_bytes

        def pid(self) -> int:
            return os.getpid()

        def forget_kept(self) -> int:
            """Free every kept result as if its last ref were gone (a broken refcount)."""
            from zmesh.tensor_transport.producer import KEPT

            keys = list(KEPT._kept)
            for key in keys:
                KEPT.drop(key)
            return len(keys)

    return zmesh.remote(**options)(_Producer) if options else zmesh.remote(_Producer)


Producer = make_producer()
ThreadedProducer = make_producer(max_concurrency=4)


@zmesh.remote
class AsyncProducer:
    def __init__(self) -> None:
        self.w = torch.arange(1000, dtype=torch.float32)

    @zmesh.method(tensor_transport="gloo")
    async def weights(self, scale: float = 1.0):
        await asyncio.sleep(0)
        return {"w": self.w * scale, "step": 7, "parts": [torch.ones(3, dtype=torch.int64)]}


@zmesh.remote(max_concurrency=4)
class Consumer:
    def load(self, d) -> tuple[float, int, list[int]]:
        return float(d["w"].sum()), d["step"], d["parts"][0].tolist()

    def pass_on(self, refs, other):
        # a holder that is not the producer passes the ref on, nested (unresolved)
        return zmesh.get(other.load.remote(refs[0]))

    def total(self, tensors) -> float:
        return float(sum(float(t.sum()) for t in tensors))

    def load_or_error(self, d):
        return "loaded"


def expected(n: int, scale: float = 1.0) -> float:
    return float(sum(range(n))) * scale


def test_a_consumer_actor_receives_the_tensors_from_the_producer(ray):
    p, c = Producer.remote(), Consumer.remote()
    ref = p.weights.remote(2.0)
    total, step, parts = ray.get(c.load.remote(ref), timeout=120)
    assert total == expected(250_000, 2.0) and step == 7 and parts == [1, 1, 1]
    # the bytes went producer -> consumer over torch.distributed: 2 MB of doubles, 3 ints
    assert ray.get(p.sent_bytes.remote()) == 250_000 * 8 + 3 * 8


def test_the_driver_get_copies_to_the_host_and_the_last_ref_frees_them(ray):
    p = Producer.remote()
    ref = p.weights.remote()
    value = ray.get(ref, timeout=120)
    assert isinstance(value["w"], torch.Tensor) and value["w"].device.type == "cpu"
    assert float(value["w"].sum()) == expected(250_000)
    assert ray.get(p.kept.remote()) == 1
    del ref, value
    gc.collect()
    assert wait_until(lambda: ray.get(p.kept.remote()) == 0, timeout=30)


def test_any_holder_passes_the_ref_on(ray):
    p, a, b = Producer.remote(), Consumer.remote(), Consumer.remote()
    ref = p.weights.remote(3.0)
    total, _, _ = ray.get(a.pass_on.remote([ref], b), timeout=120)
    assert total == expected(250_000, 3.0)


@pytest.mark.parametrize("cls", [ThreadedProducer, AsyncProducer])
def test_threaded_and_async_producers(ray, cls):
    p = cls.remote()
    consumers = [Consumer.remote() for _ in range(2)]
    refs = [p.weights.remote(float(i)) for i in range(4)]
    n = 250_000 if cls is ThreadedProducer else 1000
    out = ray.get([consumers[i % 2].load.remote(r) for i, r in enumerate(refs)], timeout=180)
    assert [o[0] for o in out] == [expected(n, float(i)) for i in range(4)]


def test_a_consumer_of_a_dead_producer_fails_clearly(ray):
    from zmesh.tensor_transport import TensorTransportError

    p, c = Producer.remote(), Consumer.remote()
    ref = p.weights.remote()
    ray.get(p.kept.remote(), timeout=120)  # the result is kept
    ray.kill(p)
    with pytest.raises(Exception) as info:
        ray.get(c.load.remote(ref), timeout=120)
    assert isinstance(info.value, TensorTransportError) or \
        "TensorTransportError" in str(info.value), info.value
    assert "producer died" in str(info.value)


def test_a_freed_result_fails_the_consumer_and_the_pair_goes_on(ray):
    from zmesh.tensor_transport import TensorTransportError

    p, c = Producer.remote(), Consumer.remote()
    first = p.weights.remote()
    assert ray.get(c.load.remote(first), timeout=120)[0] == expected(250_000)
    gone = p.weights.remote(2.0)
    ray.get(p.kept.remote(), timeout=120)
    assert ray.get(p.forget_kept.remote()) == 2
    with pytest.raises(Exception) as info:
        ray.get(c.load.remote(gone), timeout=120)
    assert isinstance(info.value, TensorTransportError) or \
        "TensorTransportError" in str(info.value), info.value
    assert "freed" in str(info.value)
    # the consumer's posted receives were drained: the same pair carries the next transfer
    assert ray.get(c.load.remote(p.weights.remote(3.0)), timeout=120)[0] == \
        expected(250_000, 3.0)


def test_a_result_of_many_tensors(ray):
    # past 16 tensors their sizes travel in a message of their own behind the request
    p, c = Producer.remote(), Consumer.remote()
    total = ray.get(c.total.remote(p.many.remote(40)), timeout=120)
    assert total == float(sum(i * (i + 1) for i in range(40)))


def test_method_refuses_an_unknown_transport():
    with pytest.raises(ValueError, match="tensor_transport must be"):
        zmesh.method(tensor_transport="carrier-pigeon")
