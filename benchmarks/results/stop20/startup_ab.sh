#!/bin/bash
# Interleaved A/B of the anchor benchmark's `startup` workload (startup, init_only, shutdown,
# import; 3 fresh processes per run) over checkouts that each have their own .venv:
#   startup_ab.sh OUTDIR ROUNDS name=/path/to/checkout ...
# Round r runs the checkouts in the given order (r odd) or reversed (r even); one JSON per run
# in OUTDIR/NAME-R.json, the time and load of each in OUTDIR/log.txt. Summarise with
#   python startup_summary.py OUTDIR name,name,...   (ratios are d6/x when one is named d6)
# Compile each checkout's bytecode first (python -m compileall -q zmesh transports), as a
# wheel install leaves it.
out=$1; rounds=$2; shift 2
names=("$@")
mkdir -p $out
for r in $(seq 1 $rounds); do
  if (( r % 2 )); then order=("${names[@]}"); else order=(); for ((i=${#names[@]}-1;i>=0;i--)); do order+=("${names[$i]}"); done; fi
  for nd in "${order[@]}"; do
    n=${nd%%=*}; d=${nd#*=}
    echo "$(date -u +%H:%M:%S) load=$(cut -d' ' -f1 /proc/loadavg) round $r $n" >> $out/log.txt
    (cd /tmp && $d/.venv/bin/python /work/shared/bench/anchor_bench.py --backend zmesh --only startup --retries 1 --quiet-wait 3 --json $out/$n-$r.json > $out/$n-$r.log 2>&1)
  done
done
