"""Warm 100 MiB puts for an instruction count: a warm-up sample, then N samples of 10 puts
(refs dropped after each), nothing else. Run under cachegrind (instr.sh) with two N: the
difference over the extra puts is the driver's instructions per warm put (the copy
included), a figure the host's load does not move.

usage: PYTHONPATH=TREE python instr_probe.py N
"""

from __future__ import annotations

import sys

import numpy as np

import zmesh as rt


def main() -> None:
    rt.init(num_cpus=2)
    arr = np.arange(100 * 1024 * 1024 // 8, dtype=np.float64)
    for _ in range(1 + int(sys.argv[1])):
        refs = [rt.put(arr) for _ in range(10)]
        del refs
    rt.shutdown()


if __name__ == "__main__":
    main()
