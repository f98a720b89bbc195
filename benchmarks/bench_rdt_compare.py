"""One producer -> consumer tensor hand-off, the same program on Ray or on zmesh: Ray Direct
Transport (`@ray.method(tensor_transport="gloo")`, Ray 2.60) against zmesh's tensor transport
(`@zmesh.method(tensor_transport="gloo")`), each beside its object store.

Each figure is the median wall time, timed in the driver, of
`get(consumer.take.remote(producer.give.remote()))`: the producer returns a tensor it holds,
the consumer receives it as an argument and returns its length. Both actor calls are
included, so compare columns, not these figures with bench_tensor_transport.py's.

    /work/ray-venv/bin/python benchmarks/bench_rdt_compare.py --runtime ray   # Ray 2.60
    python benchmarks/bench_rdt_compare.py --runtime zmesh
    ... --big    # add 256 MB and 1 GB

Ray is never a zmesh dependency: run the Ray side from an environment that has Ray and
torch (here /work/ray-venv).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

SIZES = [4 << 10, 1 << 20, 16 << 20, 64 << 20]
BIG = [256 << 20, 1 << 30]


def fmt_size(n: int) -> str:
    return f"{n >> 30} GB" if n >= 1 << 30 else f"{n >> 20} MB" if n >= 1 << 20 else \
        f"{n >> 10} KB"


def build(rt: Any, runtime: str) -> tuple[Any, Any]:
    import torch

    method = rt.method

    @rt.remote
    class Peer:  # one class for both ends (Ray's RDT hung here with two classes)
        def __init__(self) -> None:
            self.t = torch.ones(1)

        def hold(self, nbytes: int) -> None:
            self.t = torch.ones(nbytes // 4)

        def give(self) -> Any:
            return self.t

        @method(tensor_transport="gloo")
        def give_direct(self) -> Any:
            return self.t

        def take(self, t: Any) -> int:
            return int(t.numel())

    producer, consumer = Peer.remote(), Peer.remote()
    if runtime == "ray":
        from ray.experimental.collective import create_collective_group

        create_collective_group([producer, consumer], backend="torch_gloo")
    return producer, consumer


def timed(rt: Any, producer: Any, consumer: Any, direct: bool, reps: int,
          nbytes: int) -> list[float]:
    give = producer.give_direct if direct else producer.give
    assert rt.get(consumer.take.remote(give.remote())) == nbytes // 4  # warm-up
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        rt.get(consumer.take.remote(give.remote()))
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runtime", choices=["ray", "zmesh"], required=True)
    parser.add_argument("--big", action="store_true", help="add 256 MB and 1 GB")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--sizes", default="", help="sizes in MB, comma-separated (e.g. 1,16,256)")
    args = parser.parse_args()
    sizes = SIZES + (BIG if args.big else [])
    if args.sizes:
        sizes = [int(float(mb) * (1 << 20)) for mb in args.sizes.split(",")]
    if args.runtime == "ray":
        import ray as rt
    else:
        import zmesh as rt  # type: ignore[no-redef]
    store = (3 << 30) if max(sizes) > (64 << 20) else (1 << 30)
    rt.init(num_cpus=4, object_store_memory=store)
    producer, consumer = build(rt, args.runtime)
    loads = [os.getloadavg()[0]]
    rows: dict[int, dict[str, list[float]]] = {n: {"store": [], "direct": []} for n in sizes}
    for _ in range(args.rounds):
        for nbytes in sizes:
            rt.get(producer.hold.remote(nbytes))
            rows[nbytes]["store"].append(statistics.median(
                timed(rt, producer, consumer, False, args.reps, nbytes)))
            rows[nbytes]["direct"].append(statistics.median(
                timed(rt, producer, consumer, True, args.reps, nbytes)))
        loads.append(os.getloadavg()[0])
    rt.shutdown()
    version = getattr(rt, "__version__", "")
    print(f"{args.runtime} {version}: producer -> consumer hand-off, driver-timed, ms, median "
          f"of {args.reps} per round, {args.rounds} round(s) [min-max over rounds]; load "
          f"average (1 min) {min(loads):.1f}-{max(loads):.1f}")
    print(f"{'size':>7} | {'object store':>22} | {'gloo transport':>22}")
    for nbytes in sizes:
        cells = []
        for kind in ("store", "direct"):
            v = [x * 1e3 for x in rows[nbytes][kind]]
            spread = f" [{min(v):.2f}-{max(v):.2f}]" if len(v) > 1 else ""
            cells.append(f"{statistics.median(v):.2f}{spread}")
        print(f"{fmt_size(nbytes):>7} | {cells[0]:>22} | {cells[1]:>22}", flush=True)


if __name__ == "__main__":
    main()
