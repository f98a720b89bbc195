"""zmesh.collective.allreduce vs torch's pg.allreduce([t]).wait() on the same group in the
same two actors, call by call, the order rotating each cycle; "lean" is the fewest Python
frames around the same torch calls. Each kind is listed twice to show the noise.

    python benchmarks/results/stop21/scripts/api_vs_pg_call_by_call.py 0.0625,1 3000
"""

import datetime
import statistics
import sys
import time

import torch

import zmesh
import zmesh.collective as col

SLICE = datetime.timedelta(seconds=0.25)


@zmesh.remote
class M:
    def ab(self, nbytes: int, n: int) -> dict:
        from zmesh.collective import api

        g = api._group("g")
        pg = g.pg
        t = torch.ones(nbytes // 4)
        opts = api._reduce_options({}, "Allreduce", col.ReduceOp.SUM)

        def lean() -> None:
            gg = api._groups["g"]
            if gg.broken:
                raise RuntimeError(gg.broken)
            pg_ = gg.pg
            pg_.allreduce([t], opts).wait(SLICE)

        calls = {"api": lambda: col.allreduce(t, "g"), "pg": lambda: pg.allreduce([t]).wait(),
                 "lean": lean, "api2": lambda: col.allreduce(t, "g"),
                 "pg2": lambda: pg.allreduce([t]).wait(), "lean2": lean}
        names = list(calls)
        times: dict[str, list[float]] = {k: [] for k in names}
        col.barrier("g")
        for i in range(n):
            k = names[(i % len(names) + i // len(names)) % len(names)]
            start = time.perf_counter()
            calls[k]()
            times[k].append(time.perf_counter() - start)
        return {k: (statistics.median(v) * 1e6, statistics.quantiles(v, n=10)[0] * 1e6)
                for k, v in times.items()}


def main() -> None:
    zmesh.init(num_cpus=4)
    ms = [M.remote() for _ in range(2)]
    col.create_collective_group(ms, 2, [0, 1], backend="gloo", group_name="g")
    for mb in sys.argv[1].split(","):
        res = zmesh.get([m.ab.remote(int(float(mb) * (1 << 20)), int(sys.argv[2])) for m in ms])
        print(f"{mb} MB (us, rank 0 and rank 1)")
        for k in res[0]:
            print(f"  {k:>6}: p50 {res[0][k][0]:8.1f} {res[1][k][0]:8.1f}  "
                  f"p10 {res[0][k][1]:8.1f} {res[1][k][1]:8.1f}")
    zmesh.shutdown()


if __name__ == "__main__":
    main()
