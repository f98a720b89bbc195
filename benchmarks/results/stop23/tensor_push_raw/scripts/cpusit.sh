#!/bin/bash
out=$1; shift
for run in "$@"; do for side in base-pull base-push new-push; do
  case $side in base-pull) d=/tmp/tpush/base; e=0;; base-push) d=/tmp/tpush/base; e=1;; new-push) d=${NEW:-/tmp/tpush/newc}; e=1;; esac
  echo "### $side run $run $(date -u +%H:%M:%S)" >> $out
  (cd $d && ZMESH_TENSOR_PUSH=$e PYTHONPATH=$d timeout 600 /work/main/.venv/bin/python /tmp/tpush/cpu.py 1 4 16 64 2>&1 | grep -v Warning) >> $out
done; done
