#!/bin/bash
# The closing sitting: the anchor on main vs d6d7dde (issue 8's "before"), three alternations,
# each checkout run from its own directory with PYTHONPATH set to it (driver, node and workers
# all import that checkout), the raw pyzmq ipc round trip measured before each main run.
# usage: sitting.sh MAIN_DIR OUT_DIR   (d6d7dde in /tmp/base-d6 with its own venv)
set -u
M=$1; O=$2; B=/work/shared/bench/anchor_bench.py; D=/tmp/base-d6
R=$M/benchmarks/results/stop23/rawrt.py
mkdir -p "$O"
for d in "$M" "$D"; do (cd "$d" && .venv/bin/python -m compileall -q zmesh transports serializers >/dev/null 2>&1); done
uptime > "$O/load.txt"
for i in 1 2 3; do
  (cd "$M" && PYTHONPATH=$M .venv/bin/python "$R" > "$O/raw-$i.txt" 2>&1)
  (cd "$M" && PYTHONPATH=$M .venv/bin/python $B --backend zmesh --json "$O/anchor-main-$i.json" > "$O/anchor-main-$i.log" 2>&1)
  uptime >> "$O/load.txt"
  (cd "$D" && PYTHONPATH=$D .venv/bin/python $B --backend zmesh --json "$O/anchor-d6-$i.json" > "$O/anchor-d6-$i.log" 2>&1)
  uptime >> "$O/load.txt"
done
echo done > "$O/DONE"
