#!/bin/bash
# driver_keep.sh TREE_DIR PYTHON WORKLOAD N OUTDIR: driver_cost.sh, keeping the callgrind files
# (OUTDIR/cg.1 = the loop) and the probe output, for callgrind_annotate --inclusive=yes.
here=$(dirname "$(readlink -f "$0")")
dir=$1; py=$2; w=$3; n=$4; d=$5
mkdir -p $d
cd "$dir" && PYTHONPATH=$dir PYTHONHASHSEED=0 nice -n 10 valgrind --tool=callgrind --zero-before=os_getsid \
  --dump-before=os_getpriority --callgrind-out-file=$d/cg -q "$py" \
  "$here/cost_probe.py" "$w" "$n" > $d/stdout 2>&1
echo done $d
