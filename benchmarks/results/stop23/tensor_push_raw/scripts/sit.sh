#!/bin/bash
# interleaved sitting: base-pull (7f0dbe6, pushes off), base-push (7f0dbe6, ZMESH_TENSOR_PUSH=1), new-push (this tree)
out=$1; shift
for run in "$@"; do for side in base-pull base-push new-push; do
  case $side in base-pull) d=/tmp/tpush/base; e=0;; base-push) d=/tmp/tpush/base; e=1;; new-push) d=${NEW:-/tmp/tpush/newb}; e=1;; esac
  echo "### $side run $run $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
  (cd $d && ZMESH_TENSOR_PUSH=$e PYTHONPATH=$d timeout 900 /work/main/.venv/bin/python benchmarks/bench_tensor_transport.py --sizes 1,4,16,64 --blocks 4 --reps 8 2>&1 | grep -v Warning)
done; done >> $out
