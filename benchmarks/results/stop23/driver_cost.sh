#!/bin/bash
# driver_cost.sh TREE_DIR PYTHON WORKLOAD N: instructions of the driver process (all its
# threads) between the start and the end of cost_probe's loop, from callgrind: zeroed at
# the probe's os.getsid marker, dumped at its os.getpriority marker (node, workers native).
here=$(dirname "$(readlink -f "$0")")
dir=$1; py=$2; w=$3; n=$4
d=$(mktemp -d /tmp/drvcost.XXXXXX)
cd "$dir" && PYTHONPATH=$dir PYTHONHASHSEED=0 valgrind --tool=callgrind --zero-before=os_getsid \
  --dump-before=os_getpriority --callgrind-out-file=$d/cg -q "$py" \
  "$here/cost_probe.py" "$w" "$n" >/dev/null 2>&1
echo "$w $n $(grep -h ^summary $d/cg.1 | cut -d' ' -f2) $dir"
rm -rf "$d"
